"""W3C trace context (https://www.w3.org/TR/trace-context/): the `traceparent` header every request carries when the
scenario has `tracing:` (config/tracing.py).

`version-traceid-parentid-flags`: `00`, a random 16-byte trace id and 8-byte span id (lower-case hex, never all
zero), and `01` when the request is sampled, else `00`. The span id is loadgen's span of the request (the span that
live/otlp.py exports): a server that joins the trace makes its own spans children of it.

Built once per request on the event loop: one `os.urandom(24)` (a getrandom call, no blocking once the kernel's pool
is initialised), one hex and one int conversion, ~1 µs. Ids are random rather than derived from the seed: the same
seed replays the same requests in every run, and their traces must not collide in a tracing backend.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable

__all__ = ["TRACEPARENT", "TraceContext", "span_ids", "trace_sampled"]

# The header as W3C's version 00 defines it (all-zero ids are invalid; a check apart, as a regex cannot say it).
TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-(0[01])$")
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


class TraceContext:
    """A source of `traceparent` values, `sampled_share` of them flagged sampled.

    The decision is the trace id's, as OpenTelemetry's `TraceIdRatioBased` sampler makes it: sampled when the id's
    low 64 bits are below share·2^64. A collector that samples by ratio then keeps the same traces at the same
    share. `random_bytes` draws the ids (`os.urandom`; a seeded `random.Random(seed).randbytes` in tests)."""

    __slots__ = ("_bound", "_random")

    def __init__(self, sampled_share: float, random_bytes: Callable[[int], bytes] = os.urandom) -> None:
        self._bound = round(sampled_share * (1 << 64))
        self._random = random_bytes

    def next(self) -> str:
        """A new request's `traceparent`."""
        while True:
            raw = self._random(24)
            ids = raw.hex()
            trace, span = ids[:32], ids[32:]
            if trace != _ZERO_TRACE and span != _ZERO_SPAN:  # (2^-64 odds: W3C calls all-zero ids invalid)
                break
        flags = "01" if int.from_bytes(raw[8:16], "big") < self._bound else "00"
        return f"00-{trace}-{span}-{flags}"


def trace_sampled(traceparent: str) -> bool:
    """Whether a `traceparent` built here says sampled (its flags' low bit)."""
    return traceparent.endswith("1")


def span_ids(traceparent: str) -> tuple[int, int]:
    """(trace id, span id) of a version-00 `traceparent`, as the integers OpenTelemetry's SDK holds."""
    return int(traceparent[3:35], 16), int(traceparent[36:52], 16)
