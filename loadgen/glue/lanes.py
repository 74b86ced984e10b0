"""A lane: what one Locust user needs to stream requests to one variant, built once when the user spawns.

Everything that costs (dialect lookup, header bytes, the sampler's word pool, the socket) happens here, not per
request, so the per-request work on the event loop is: draw a spec, dump JSON, send, read.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import time
import weakref

import gevent

from ..config import Scenario, Variant
from ..dialects import describe_error_body, get_dialect
from ..prompts import RequestSampler, sampler_for
from ..records import ErrorClass, RequestRecord
from ..stream import StreamAccumulator
from .connection import Endpoint, StreamConnection, TransportError, tls_context

__all__ = ["Lane", "LaneAssigner"]


class _Deadline(Exception):
    """The whole-request timeout (gevent.Timeout raises this inside the request)."""


# Building a scenario's sampler (mixes, system prompts, the word block) takes ~0.3 ms; with a thousand users spawning,
# that is 0.3 s of a blocked event loop. Each scenario's is built once and forked per stream (a few references).
# (Keyed by id: scenarios are unhashable; the weak reference tells a reused id from the same scenario.)
_base_samplers: dict[int, tuple[weakref.ref[Scenario], RequestSampler]] = {}


def _sampler(scenario: Scenario, stream_id: int) -> RequestSampler:
    hit = _base_samplers.get(id(scenario))
    if hit is None or hit[0]() is not scenario:
        if len(_base_samplers) >= 8:
            _base_samplers.clear()
        hit = _base_samplers[id(scenario)] = (weakref.ref(scenario), sampler_for(scenario, 0))
    return hit[1].with_stream(stream_id)


class Lane:
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
        "_extra_body",
        "_secret",
    )

    def __init__(self, scenario: Scenario, variant: Variant, stream_id: int, worker_tag: str) -> None:
        self.variant = variant.name
        self.stream_id = stream_id
        self._dialect = get_dialect(variant.dialect)
        self._conn = StreamConnection(
            Endpoint(variant.base_url),
            variant.connect_timeout,
            variant.read_timeout,
            tls_ca_file=variant.tls_ca_file,
            tls_verify=variant.tls_verify,
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
        self._sampler: RequestSampler = _sampler(scenario, stream_id)
        self._rid_prefix = f"{worker_tag}-{variant.name}-{stream_id}"
        self._request_timeout = variant.request_timeout
        self._continuous = variant.continuous_usage_stats
        self._model = variant.model
        self._extra_body = variant.extra_body or None

    def close(self) -> None:
        self._conn.close()

    def run_one(self, warmup_end: float) -> RequestRecord:
        """Stream the next request of this lane's seeded sequence; never raises for a target's misbehaviour."""
        spec = self._sampler.next()
        rid = f"{self._rid_prefix}-{spec.index}"
        rec = RequestRecord(
            rid,
            self.variant,
            spec.mix,
            spec.bucket,
            prompt_tokens_target=spec.prompt_tokens,
            max_tokens=spec.max_tokens,
        )
        acc = StreamAccumulator(rec, self._dialect)
        body = self._dialect.build_body(spec, self._model, self._continuous, self._extra_body)
        extra = b"X-Request-Id: " + rid.encode() + b"\r\n"
        timeout = gevent.Timeout(self._request_timeout, _Deadline)
        timeout.start()
        try:
            _, status, err_body = self._conn.post_stream(self._head, extra, body, acc)
            rec.status = status
            if status == 200:
                acc.finish(time.monotonic())
            else:
                rec.done = time.monotonic()
                rec.error = ErrorClass.for_status(status)
                # The server's own message (`error.message`, TGI / Ollama `error`, FastAPI `detail`), not raw JSON.
                # Kept longer than reports show so that a key echoed in it is redacted whole below.
                rec.error_detail = describe_error_body(err_body, 2000)
        except TransportError as e:
            acc.fail(time.monotonic(), e.error_class, e.detail)
        except _Deadline:
            self._conn.close()
            acc.fail(time.monotonic(), ErrorClass.TIMEOUT, f"request exceeded {self._request_timeout:g}s")
        finally:
            timeout.close()
        if not rec.sent:
            rec.sent = rec.done or time.monotonic()
        if self._secret is not None and rec.error is not None:
            # Servers echo bad keys in error bodies ("Incorrect API key provided: sk-…"); reports must not.
            rec.error_detail = rec.error_detail.replace(self._secret, "***")
            rec.partial_bytes = rec.partial_bytes.replace(self._secret.encode(), b"***")
        if len(rec.error_detail) > 500:
            rec.error_detail = rec.error_detail[:499] + "…"
        rec.warmup = rec.sent < warmup_end
        return rec


class LaneAssigner:
    """Hands each new user a variant (smooth weighted round-robin) and a stream id.

    The stream id counts users per variant, so the k-th user of every variant replays the same seeded requests:
    variants see the same prompts in the same order, which is what makes them comparable request by request.
    """

    __slots__ = ("_variants", "_current", "_slots", "_worker_index")

    def __init__(self, variants: list[Variant], worker_index: int) -> None:
        self._variants = variants
        self._current = [0.0] * len(variants)
        self._slots = [0] * len(variants)
        self._worker_index = worker_index
        for v in variants:
            # Load each TLS trust store now, before any request is in flight (the system store takes ~30 ms of
            # CPU): connections share it. One that fails to load fails that variant's requests as `connect`.
            if v.base_url.startswith("https:"):
                with contextlib.suppress(OSError, ssl.SSLError):
                    tls_context(v.tls_ca_file, v.tls_verify)

    def next(self) -> tuple[Variant, int]:
        total = sum(v.weight for v in self._variants)
        for i, v in enumerate(self._variants):
            self._current[i] += v.weight
        best = max(range(len(self._variants)), key=lambda i: self._current[i])
        self._current[best] -= total
        slot = self._slots[best]
        self._slots[best] += 1
        return self._variants[best], self._worker_index * 100_000 + slot
