"""Per-request SLOs: which bounds a finished request missed, so groups can count goodput (requests that met all).

Judged once per successful request, off the hot path (the runtime's recorder, or a rebuild from raw rows), from
the record's own timings; failed requests are never good and are judged by the success-rate SLO instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from loadgen.measure.fates import FATES, fate_of, latency
from loadgen.measure.records import RequestRecord

__all__ = ["GOODPUT_METRICS", "NO_TOKENS", "goodput_misses"]


def _itl_max(rec: RequestRecord) -> float | None:
    t = rec.chunk_times
    if len(t) < 2:
        return None
    return max(b - a for a, b in zip(t, t[1:], strict=False))


# Metric name -> the record's value in seconds (None: not measured for this request, e.g. one-token replies
# have no TPOT, closed-loop requests no queue delay; a bound on it is then met vacuously).
GOODPUT_METRICS: dict[str, Callable[[RequestRecord], float | None]] = {
    "ttft": lambda r: r.ttft,
    "tpot": lambda r: r.tpot,
    "e2e": lambda r: r.e2e,
    "itl_max": _itl_max,
    "queue_delay": lambda r: r.queue_delay,
}


# The bounds whose values the fate table decides (the rest are the record's own: ITL's largest gap, queue delay).
_BY_FATE = frozenset(("ttft", "tpot", "e2e"))

# The miss of a successful reply that carried no token: whatever the bounds, it is not good (a missing TTFT would
# pass every bound vacuously).
NO_TOKENS = "no_tokens"


def goodput_misses(rec: RequestRecord, bounds_ms: Mapping[str, float]) -> tuple[str, ...] | None:
    """The bounds `rec` missed (empty: it counts toward goodput); None when its fate's row (measure/fates.py) does
    not judge it (a failure is never good; the success rate judges it). A latency its row censors misses its bound
    (a request cut or given up before its end did not end in time); a reply with no token misses `no_tokens`."""
    row = FATES[fate_of(rec)]
    if row.goodput != "judged":
        return None
    if row.outcome == "success" and (not rec.chunk_times if rec.streamed else not rec.output_token_count):
        return (NO_TOKENS,)  # a whole reply: its usage's count
    missed = []
    for metric, bound in bounds_ms.items():
        if metric in _BY_FATE:
            value, censored = latency(rec, metric, row)
            if censored:
                missed.append(metric)
                continue
        else:
            value = GOODPUT_METRICS[metric](rec)
        if value is not None and value * 1e3 > bound:
            missed.append(metric)
    return tuple(missed)
