"""A request stream: one Locust user's seeded sequence of requests to one variant, with everything sending them
needs (the variant's dialect, the request head's bytes, the sampler's fork, the keep-alive connection), built once
when the user spawns.

Everything that costs (dialect lookup, header bytes, the sampler's word pool, the socket) happens here, not per
request, so the per-request work on the event loop is: draw a spec, dump JSON, send, read.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import time
from collections.abc import Iterator
from typing import Any

import gevent

from loadgen.client.connection import Endpoint, StreamConnection, TransportError
from loadgen.client.dial import Dialer
from loadgen.client.reactor import Reactor
from loadgen.config.classes import sends_priority
from loadgen.config.scenario import Scenario, Variant
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.measure.token_counts import needs_text
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect
from loadgen.traffic.sampler import RequestSampler, RequestSpec, sampler_for

__all__ = [
    "OPEN_LOOP_STREAM",
    "CutByStop",
    "RequestStream",
    "StreamAssigner",
    "class_wire",
    "senders_per_variant",
    "weighted_turns",
]

# The request stream an open-loop run draws from: request i is the schedule's arrival i (all workers together).
OPEN_LOOP_STREAM = 0


def weighted_turns(weights: dict[str, float]) -> Iterator[str]:
    """Names in proportion to their weights, as evenly spread as can be (smooth weighted round-robin): the first n
    turns give each name round(n·share) within one, so any n >= len(weights) with even weights reaches every name.
    """
    current = dict.fromkeys(weights, 0.0)
    total = sum(weights.values())
    while True:
        for name, weight in weights.items():
            current[name] += weight
        best = max(current, key=current.__getitem__)
        current[best] -= total
        yield best


def senders_per_variant(scenario: Scenario, users: list[int]) -> dict[str, int]:
    """Open loop: the users of each variant when workers hold `users` users each (each worker splits its own users
    over the variants by `weighted_turns`, so every worker has senders of every variant it has enough users for)."""
    out = dict.fromkeys((v.name for v in scenario.variants), 0)
    weights = {v.name: v.weight for v in scenario.variants}
    for n in users:
        turns = weighted_turns(weights)
        for _ in range(n):
            out[next(turns)] += 1
    return out


def class_wire(scenario: Scenario, variant: Variant) -> dict[str, tuple[bytes, dict[str, Any] | None]]:
    """Per priority class (by name; "" when the scenario has none): the header lines its requests to `variant` add,
    and the extra body its dialect merges into theirs (the variant's `extra_body`, plus the class's `priority` where
    the variant's dialect and host take one). Built once per stream, so a request pays one dict lookup for its
    class."""
    extra = variant.extra_body or None
    classes = scenario.traffic.classes
    if not classes:
        return {"": (b"", extra)}
    in_body = sends_priority(variant.dialect, variant.base_url)
    out: dict[str, tuple[bytes, dict[str, Any] | None]] = {}
    for c in classes:
        head = "".join(f"{k}: {v}\r\n" for k, v in c.headers.items()).encode("ascii")
        body = {**(extra or {}), "priority": c.priority} if in_body and c.priority is not None else extra
        out[c.name] = (head, body)
    return out


class _Deadline(Exception):
    """The whole-request timeout (gevent.Timeout raises this inside the request)."""


class CutByStop(gevent.GreenletExit):
    """The user was stopped mid-request; `record` is what the request got until then (`cut_by_stop`). `written`:
    whether the request had gone out (an open-loop arrival stopped before it did was never sent)."""

    def __init__(self, record: RequestRecord, written: bool = True) -> None:
        super().__init__()
        self.record = record
        self.written = written


class VariantActivity:
    """Whether a variant was idle on this worker when a request goes out: cold starts are the target's (a
    scale-to-zero deployment sleeps when no request of any stream reaches it), so they are decided per variant, not
    per stream (at a low open-loop rate over many senders every stream is idle long, the variant is not)."""

    __slots__ = ("in_flight", "last_done")

    def __init__(self) -> None:
        self.in_flight = 0
        self.last_done: float | None = None  # when the variant's latest request on this worker ended (None: none yet)

    def cold(self, sent: float, idle_gap: float) -> str:
        """ "first" (the variant's first request on this worker), "idle" (nothing of it in flight, and its last
        request ended more than `idle_gap` before `sent`) or "" (warm)."""
        if self.last_done is None and self.in_flight == 0:
            return "first"
        if self.in_flight == 0 and self.last_done is not None and sent - self.last_done > idle_gap:
            return "idle"
        return ""

    def done(self, t: float) -> None:
        self.last_done = t if self.last_done is None else max(self.last_done, t)


class RequestStream:
    """Stream `stream_id` of the scenario's seeded requests (`RequestSampler`'s stream: the same id replays the same
    requests against every variant), sent one after another to one variant over one keep-alive connection."""

    __slots__ = (
        "variant",
        "stream_id",
        "_dialect",
        "_conn",
        "_head",
        "_sampler",
        "_rid_prefix",
        "_request_timeout",
        "_continuous",
        "_model",
        "_classes",
        "_secret",
        "_idle_gap",
        "_activity",
        "keep_text",
    )

    def __init__(
        self,
        scenario: Scenario,
        variant: Variant,
        stream_id: int,
        worker_tag: str,
        *,
        sampler: RequestSampler | None = None,
        dialer: Dialer | None = None,
        reactor: Reactor | None = None,
        keep_text: bool = False,
        activity: VariantActivity | None = None,
    ) -> None:
        """`sampler` is the scenario's (any stream: this one forks it), `dialer` and `reactor` are the process's
        (see `StreamConnection`); each is built for this stream alone when not given. `keep_text`: records keep
        the reply's text (`RequestRecord.output_text`; such streams read on the Python path). An attribute: a
        caller may turn it on for some requests only."""
        self.variant = variant.name
        self.stream_id = stream_id
        self._dialect = get_dialect(variant.dialect)
        self._conn = StreamConnection(
            Endpoint(variant.base_url),
            variant.connect_timeout,
            variant.read_timeout,
            tls_ca_file=variant.tls_ca_file,
            tls_verify=variant.tls_verify,
            dialer=dialer,
            reactor=reactor,
        )
        headers = {
            "Content-Type": "application/json",
            "Accept": self._dialect.accept,
            "User-Agent": "loadgen",
            **variant.headers,
        }
        self._secret: str | None = None
        if variant.api_key_env:
            key = os.environ.get(variant.api_key_env, "")
            if key:
                headers["Authorization"] = f"Bearer {key}"
                self._secret = key
        self._head = self._conn.head_bytes(self._dialect.path_for(variant.model), headers)
        self._sampler = (sampler_for(scenario, 0) if sampler is None else sampler).with_stream(stream_id)
        self._rid_prefix = f"{worker_tag}-{variant.name}-{stream_id}"
        self._request_timeout = variant.request_timeout
        self._continuous = variant.continuous_usage_stats
        self._model = variant.model
        self._classes = class_wire(scenario, variant)
        self._idle_gap = scenario.cold_starts.idle_gap
        # The variant's activity on this worker, shared by its streams (one of its own when not given).
        self._activity = activity if activity is not None else VariantActivity()
        self.keep_text = keep_text

    def close(self) -> None:
        self._conn.close()

    @property
    def sampler(self) -> RequestSampler:
        """This stream's fork of the scenario's sampler (a session's follow-ups are drawn from it)."""
        return self._sampler

    def draw(self, index: int | None = None) -> RequestSpec:
        """The next request of this stream, or (open loop) its request `index`."""
        return self._sampler.next() if index is None else self._sampler.spec_at(index)

    def send_next(
        self,
        warmup_end: float,
        index: int | None = None,
        scheduled: float | None = None,
        spec: RequestSpec | None = None,
    ) -> RequestRecord:
        """Send the next request of this stream (open loop: its request `index`, due at `scheduled`; or `spec`, drawn
        already: a session's turn) and read its response stream into its record; never raises for a target's
        misbehaviour."""
        if spec is None:
            spec = self.draw(index)
        # A session's later turns share its index: the turn keeps their ids apart.
        rid = f"{self._rid_prefix}-{spec.index}" + (f"-t{spec.turn}" if spec.turn > 1 else "")
        rec = RequestRecord(
            rid,
            self.variant,
            spec.mix,
            spec.bucket,
            scheduled=scheduled,
            prompt_tokens_target=spec.prompt_tokens,
            shared_prefix_tokens=spec.shared_prefix_tokens,
            turn=spec.turn,
            max_tokens=spec.max_tokens,
            priority_class=spec.priority_class,
        )
        acc = StreamAccumulator(rec, self._dialect, self.keep_text)
        class_head, extra_body = self._classes[spec.priority_class]
        body = self._dialect.build_body(spec, self._model, self._continuous, extra_body)
        extra = b"X-Request-Id: " + rid.encode() + b"\r\n" + class_head
        activity = self._activity
        state = activity.cold(time.monotonic(), self._idle_gap)  # before this request counts as in flight
        activity.in_flight += 1
        timeout = gevent.Timeout(self._request_timeout, _Deadline)
        timeout.start()
        try:
            _, status, err_body = self._conn.post_stream(self._head, extra, body, acc)
            rec.status = status
            # Ends at the arrival stamp of the last read, like every chunk time (a stream without an end marker of
            # its own, Triton's, ends there).
            if status == 200:
                acc.finish(self._conn.last_rx)
            else:
                acc.refused(self._conn.last_rx, status, err_body, self._conn.location)
        except TransportError as e:
            acc.fail(time.monotonic(), e.error_class, e.detail)
        except _Deadline:
            self._conn.close()
            acc.fail(time.monotonic(), ErrorKind.TIMEOUT, f"request exceeded {self._request_timeout:g}s")
        except gevent.GreenletExit:
            # Locust stops users by killing their greenlets: this request was in flight at the stop. It keeps the
            # tokens it got (they count for throughput) and is handed back for recording before the user dies.
            self._conn.close()
            rec.done = time.monotonic()
            rec.cut_by_stop = True
            acc.close_text()
            written = bool(rec.sent)
            if not written:
                rec.sent = rec.done
            raise CutByStop(rec, written) from None
        finally:
            timeout.close()
            activity.in_flight -= 1
        if not rec.sent:
            rec.sent = rec.done or time.monotonic()
        if self._secret is not None and rec.error is not None:
            # Servers echo bad keys in error bodies ("Incorrect API key provided: sk-…"); reports must not.
            rec.error_detail = rec.error_detail.replace(self._secret, "***")
            rec.partial_bytes = rec.partial_bytes.replace(self._secret.encode(), b"***")
        if len(rec.error_detail) > 500:
            rec.error_detail = rec.error_detail[:499] + "…"
        # The window holds what completed inside it: a request sent during the warm-up that ends after it counts.
        rec.warmup = (rec.done if rec.done is not None else rec.sent) < warmup_end
        rec.cold = state or ("new_connection" if rec.connect_s is not None else "")
        if rec.done is not None:
            activity.done(rec.done)
        return rec


class StreamAssigner:
    """Builds each new user's request stream, assigning its stream id; Locust's dispatcher decides the variant (one
    user class per variant, weighted), so users per variant follow the weights over all workers together. One per
    run.

    The stream id counts this worker's users per variant, so the k-th user of every variant replays the same seeded
    requests: variants see the same prompts in the same order, which makes them comparable request by request. In
    open loop every user sends from one stream (`OPEN_LOOP_STREAM`), the request the schedule's index names.
    Every stream shares the run's dialer and reactor, and forks the scenario's sampler, built once here: building one
    (mixes, system prompts, the word block) per user would block the event loop while a thousand users spawn.
    """

    __slots__ = (
        "_scenario",
        "_variants",
        "_slots",
        "_activity",
        "_worker_index",
        "_worker_tag",
        "_sampler",
        "_open_loop_sampler",
        "_turns",
        "_dialer",
        "_reactor",
    )

    def __init__(
        self, scenario: Scenario, worker_index: int, worker_tag: str, dialer: Dialer, reactor: Reactor
    ) -> None:
        self._scenario = scenario
        self._variants = {v.name: v for v in scenario.variants}
        self._slots = dict.fromkeys(self._variants, 0)
        self._activity = {name: VariantActivity() for name in self._variants}
        self._worker_index = worker_index
        self._worker_tag = worker_tag
        self._sampler = sampler_for(scenario, 0)
        self._open_loop_sampler = self._sampler.with_stream(OPEN_LOOP_STREAM)
        self._turns = weighted_turns({v.name: v.weight for v in scenario.variants})
        self._dialer = dialer
        self._reactor = reactor
        for v in scenario.variants:
            # Load each TLS trust store now, before any request is in flight (parsing the system store holds
            # the loop up): connections share it. One that fails to load fails that variant's requests as `connect`.
            if v.base_url.startswith("https:"):
                with contextlib.suppress(OSError, ssl.SSLError):
                    dialer.tls_context(v.tls_ca_file, v.tls_verify)

    def senders(self, variant: str) -> int:
        """The streams made for `variant` on this worker so far: its users (in open loop, its senders)."""
        return self._slots[variant]

    def new_stream(self, variant: str) -> RequestStream:
        """The next user's request stream to `variant`."""
        slot = self._slots[variant]
        self._slots[variant] = slot + 1
        open_loop = self._scenario.load.arrival is not None
        v = self._variants[variant]
        return RequestStream(
            self._scenario,
            v,
            OPEN_LOOP_STREAM if open_loop else self._worker_index * 100_000 + slot,
            self._worker_tag,
            sampler=self._sampler,
            dialer=self._dialer,
            reactor=self._reactor,
            # The scenario's tokenizer counts the chunks of servers that stream no counts (runtime's recorder).
            keep_text=needs_text(self._scenario.tokenizer, v.dialect, v.continuous_usage_stats),
            activity=self._activity[variant],
        )

    def next_variant(self) -> str:
        """Open loop: the variant this worker's next user sends to (Locust runs one user class then, which it
        spreads evenly over the workers; each worker splits its users over the variants by weight, so each holds
        senders of every variant. Per-variant classes would let Locust put all of one variant on one worker, and
        that worker's share of the other variants' schedules would have no sender)."""
        return next(self._turns)

    def mix_of(self, index: int) -> str:
        """The mix of open-loop request `index` (to count an arrival that was not sent under its mix)."""
        return self._open_loop_sampler.spec_at(index).mix
