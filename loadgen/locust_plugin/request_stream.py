"""A request stream: one Locust user's seeded sequence of requests to one variant, with everything sending them
needs (the variant's dialect, the request head's bytes, the sampler's fork, the keep-alive connection), built once
when the user spawns.

Everything that costs (dialect lookup, header bytes, the sampler's word pool, the socket) happens here, not per
request, so the per-request work on the event loop is: draw a spec, dump JSON, send, read.
"""

from __future__ import annotations

import contextlib
import copy
import ssl
import time
from typing import Any

import gevent

from loadgen.client.connection import Endpoint, StreamConnection, TransportError
from loadgen.client.dial import Dialer
from loadgen.client.reactor import Reactor
from loadgen.config.adapters import AdapterPlan
from loadgen.config.cancel import CancelPlan
from loadgen.config.classes import sends_priority
from loadgen.config.credentials import credential_values, redact, redact_bytes
from loadgen.config.routing import slo_header_values
from loadgen.config.scenario import Scenario, Variant
from loadgen.config.tools import ToolsPlan, tools_by_mix
from loadgen.measure.fates import sent_in_warmup
from loadgen.measure.outputs import OutputSamples
from loadgen.measure.pairs import pair_hash
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.measure.structured import StructuredJudge
from loadgen.measure.token_counts import needs_text
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import dialect_for
from loadgen.protocol.traceparent import TraceContext
from loadgen.protocol.whole_reply import WholeReplyAccumulator
from loadgen.traffic.sampler import RequestSampler, RequestSpec, sampler_for
from loadgen.traffic.senders import senders_per_variant, weighted_turns
from loadgen.traffic.sessions import SessionHeaders

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
# One per process: every stream's requests of a mix carry the same schema object, compiled once.
_JUDGE = StructuredJudge()


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


class _GiveUp(Exception):
    """`traffic.cancel` by time: the client gives the request up (a gevent.Timeout raises this inside it)."""


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
        "_template",
        "_rid_prefix",
        "_request_timeout",
        "_continuous",
        "_model",
        "_classes",
        "_secrets",
        "_idle_gap",
        "_activity",
        "_text_sample",
        "_trace",
        "_cancel",
        "_tools",
        "_adapters",
        "_sessions",
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
        text_sample: OutputSamples | None = None,
    ) -> None:
        """`sampler` is the scenario's (any stream: this one forks it), `dialer` and `reactor` are the process's
        (see `StreamConnection`); each is built for this stream alone when not given. `keep_text`: records keep
        the reply's text (`RequestRecord.output_text`; such streams read on the Python path). An attribute: a
        caller may turn it on for some requests only. `text_sample` (`quality:`): the process's sample of replies;
        a request it would keep, or that carries a reference answer, keeps its text too."""
        self.variant = variant.name
        self.stream_id = stream_id
        self._dialect = dialect_for(
            variant.dialect, variant.max_tokens_field, variant.stream, variant.items_per_request or 1
        )
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
            # The dialect's own (anthropic-version), unless the variant names one of them in any case.
            **{k: v for k, v in self._dialect.headers.items() if k.lower() not in {h.lower() for h in variant.headers}},
            **variant.headers,
        }
        routing = variant.routing
        if routing is not None and routing.slo_headers is not None:
            # The same targets on every request: written once into the head, nothing per request.
            headers.update(slo_header_values(routing.slo_headers, scenario.goodput))
        credentials = variant.credential_headers()
        headers.update(credentials)
        self._secrets = credential_values(credentials)
        self._head = self._conn.head_bytes(self._dialect.path_for(variant.model), headers)
        self._sampler = (sampler_for(scenario, 0) if sampler is None else sampler).with_stream(stream_id)
        self._template: dict[str, int] = {}  # mix -> its chat template's prompt tokens (`_template_tokens`)
        self._rid_prefix = f"{worker_tag}-{variant.name}-{stream_id}"
        self._request_timeout = variant.request_timeout
        self._continuous = variant.continuous_usage_stats
        self._model = variant.model
        self._classes = class_wire(scenario, variant)
        self._idle_gap = scenario.cold_starts.idle_gap
        # The variant's activity on this worker, shared by its streams (one of its own when not given).
        self._activity = activity if activity is not None else VariantActivity()
        self.keep_text = keep_text
        self._text_sample = text_sample
        # `tracing:`: each request's traceparent (protocol/traceparent.py); None: requests carry none.
        self._trace = None if scenario.tracing is None else TraceContext(scenario.tracing.sampled_share)
        # `traffic.cancel`: which requests the client gives up, and where (the same ones for every variant).
        cancel = scenario.traffic.cancel
        self._cancel = None if cancel is None else CancelPlan(cancel, scenario.seed)
        # `traffic.mixes[].tools`: which requests carry tools / a response_format (the same ones for every variant).
        tools = tools_by_mix(scenario.traffic.mixes)
        self._tools = ToolsPlan(tools, scenario.seed) if tools else None
        # `variants[].adapters`: the model each request names (the same for every variant listing the same ones).
        self._adapters = AdapterPlan(variant.adapters, scenario.seed, variant.model) if variant.adapters else None
        # `variants[].routing`: each session's id and router token (None: its requests carry neither).
        on_sessions = routing is not None and (routing.session_header or routing.token_header)
        self._sessions = SessionHeaders(routing, scenario.seed, stream_id) if on_sessions and routing else None

    def close(self) -> None:
        self._conn.close()

    def fork(self) -> RequestStream:
        """The same stream on a connection of its own (an agent's sub-agent, sent beside its parent); its session
        headers start afresh (a sub-agent carries its task's session id: traffic/sessions.py)."""
        twin = copy.copy(self)
        twin._conn = self._conn.twin()
        if self._sessions is not None:
            twin._sessions = self._sessions.fresh()
        return twin

    @property
    def sampler(self) -> RequestSampler:
        """This stream's fork of the scenario's sampler (a session's follow-ups are drawn from it)."""
        return self._sampler

    def _wants_text(self, spec: RequestSpec) -> bool:
        """With `quality:`, whether this request's reply is one the sample would keep (measure/outputs.py, by its
        pair key) or is to be judged against a reference: only those read on the Python path, the others keep the
        C fast path once the sample's level rises."""
        s = self._text_sample
        if s is None:
            return False
        return spec.reference is not None or s.wants(pair_hash(f"{self.stream_id}-{spec.index}-{spec.turn}"))

    def draw(self, index: int | None = None) -> RequestSpec:
        """The next request of this stream, or (open loop) its request `index`."""
        return self._sampler.next() if index is None else self._sampler.spec_at(index)

    def _template_tokens(self, spec: RequestSpec) -> int:
        """What the server's chat template adds to the request's prompt tokens, where the scenario's tokenizer
        knows it (a session's opening turn only: later turns add markers per message; traffic/sessions.py)."""
        if not self._dialect.chat_template or spec.turn > 1:
            return 0
        found = self._template.get(spec.mix)
        if found is None:
            found = self._template[spec.mix] = self._sampler.template_overhead(spec.mix) or 0
        return found

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
        # A session's later turns share its index: the turn keeps their ids apart (and an agent's sub-agent path).
        rid = f"{self._rid_prefix}-{spec.index}" + (f"-b{spec.branch}" if spec.branch else "")
        rid += f"-t{spec.turn}" if spec.turn > 1 else ""
        rec = RequestRecord(
            rid,
            self.variant,
            spec.mix,
            spec.bucket,
            scheduled=scheduled,
            prompt_tokens_target=spec.prompt_tokens + self._template_tokens(spec),
            shared_prefix_tokens=spec.shared_prefix_tokens,
            turn=spec.turn,
            max_tokens=spec.max_tokens,
            priority_class=spec.priority_class,
            reference=spec.reference,
            images=None if spec.images is None else len(spec.images),
        )
        model = self._model
        if self._adapters is not None:
            rec.adapter = model = self._adapters.draw(self.stream_id, spec.index)
        # A variant's `stream: false`: one whole reply, read at its end (protocol/whole_reply.py).
        reader = StreamAccumulator if self._dialect.stream else WholeReplyAccumulator
        class_head, extra_body = self._classes[spec.priority_class]
        fields = None if self._tools is None else self._tools.draw(spec.mix, self.stream_id, spec.index, spec.turn)
        asked = None if fields is None else fields.get("response_format")  # its reply is judged: keep the text
        acc = reader(rec, self._dialect, self.keep_text or asked is not None or self._wants_text(spec))
        if fields is not None:  # the variant's own extra_body still wins
            rec.carried_tools = True
            extra_body = {**fields, **(extra_body or {})}
            # Its structure ends the reply (a closed JSON object, a tool call): forcing tokens past that end
            # (`exact_output`'s ignore_eos + min_tokens) makes a guided server pad it until max_tokens and break
            # it (vLLM: every reply cut, not JSON). max_tokens stays a cap for these requests.
            extra_body.pop("ignore_eos", None)
        body = self._dialect.build_body(spec, model, self._continuous, extra_body)
        extra = b"X-Request-Id: " + rid.encode() + b"\r\n" + class_head
        if self._trace is not None:
            rec.traceparent = traceparent = self._trace.next()
            extra += b"traceparent: " + traceparent.encode() + b"\r\n"
        sessions = self._sessions
        capture = None
        if sessions is not None and spec.turns:
            extra += sessions.head(spec)
            capture = sessions.wants(spec)
        activity = self._activity
        state = activity.cold(time.monotonic(), self._idle_gap)  # before this request counts as in flight
        activity.in_flight += 1
        give_up = None
        cancel = None if self._cancel is None else self._cancel.draw(self.stream_id, spec.index, spec.turn)
        if cancel is not None and cancel[0] == "tokens" and isinstance(acc, StreamAccumulator):
            acc.give_up_after(cancel[1])
        elif cancel is not None and cancel[0] == "seconds":
            give_up = gevent.Timeout(cancel[1], _GiveUp)
            give_up.start()
        timeout = gevent.Timeout(self._request_timeout, _Deadline)
        timeout.start()
        try:
            _, status, err_body = self._conn.post_stream(self._head, extra, body, acc, capture)
            rec.status = status
            if capture is not None and sessions is not None:
                sessions.took(spec, self._conn.captured)
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
        except _GiveUp:
            rec.done = time.monotonic()
            self._conn.close()  # as a browser closing the tab: the server sees the connection go
            rec.cancelled = "time"
            acc.close_text()
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
            rec.warmup = sent_in_warmup(rec, warmup_end)
            raise CutByStop(rec, written) from None
        finally:
            timeout.close()
            if give_up is not None:
                give_up.close()
            activity.in_flight -= 1
        if not rec.sent:
            rec.sent = rec.done or time.monotonic()
        if asked is not None and rec.error is None and not rec.cancelled:
            rec.structured = _JUDGE.judge(rec.output_text, asked)
        if self._secrets and rec.error is not None:
            # Servers echo bad keys in error bodies ("Incorrect API key provided: sk-…"); reports must not.
            rec.error_detail = redact(rec.error_detail, self._secrets)
            rec.partial_bytes = redact_bytes(rec.partial_bytes, self._secrets)
        if len(rec.error_detail) > 500:
            rec.error_detail = rec.error_detail[:499] + "…"
        rec.warmup = sent_in_warmup(rec, warmup_end)
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
        "_text_sample",
    )

    def __init__(
        self,
        scenario: Scenario,
        worker_index: int,
        worker_tag: str,
        dialer: Dialer,
        reactor: Reactor,
        text_sample: OutputSamples | None = None,
    ) -> None:
        """`text_sample`: the process's sample of replies (`Aggregate.outputs`), which with `quality:` decides
        which requests keep their text (one of its own when not given: then every one does)."""
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
        self._text_sample = None if scenario.quality is None else text_sample or OutputSamples()
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
            # (A whole reply has no chunks to count: its usage counts it.)
            keep_text=v.stream and needs_text(self._scenario.tokenizer, v.dialect, v.continuous_usage_stats),
            activity=self._activity[variant],
            # With `quality:` the replies the sample keeps are compared with the baseline's (measure/outputs.py).
            text_sample=self._text_sample,
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
