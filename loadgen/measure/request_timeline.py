"""A bounded, seeded sample of requests per variant with their whole course — scheduled → sent → first token →
done, and the inter-token gaps over the variant's ITL bound — for the report's request timeline
(report/request_timeline.py): where stalls, queueing and preemption show, which histograms cannot.

Bottom-k sampling: each request's key (its place in the seeded request stream, `pairs.pair_key`: the same request has
the same key in every variant) is hashed with the scenario's seed, and a variant keeps the `cap` requests of
smallest hash. The kept set depends on the keys alone — not on which worker sent what, nor on the order reports
merge in — and the variants keep the same requests where they were sent the same ones, so their lanes line up. A
worker keeps its own bottom-k and ships, with each report, the rows that entered it since the last one (a request
enters with probability cap / n: over a run of n requests about cap · (1 + ln(n / cap)) rows per variant).

Requests of the measured window and those the stop cut (they show where the run ended) are kept, failed ones
included; warm-up requests are not. Times are wall-clock seconds (workers on several hosts share no monotonic
clock); gaps are per chunk, and a gap is slow when its per-token share (gap ÷ the chunk's tokens, as ITL counts it)
is over the bound.
"""

from __future__ import annotations

import heapq
from typing import Any

from loadgen.config.scenario import Scenario
from loadgen.measure.fates import fate_name
from loadgen.measure.pairs import pair_hash, pair_key
from loadgen.measure.records import RequestRecord

__all__ = ["SLOW_GAPS_KEPT", "TIMELINE_CAP", "RequestTimelineSample", "itl_bound_ms"]

# Lanes per variant: enough to see a pattern (a stall that hits every stream at once, a queue that grows), few
# enough that ten variants' lanes keep the HTML report small (30-50 KB of SVG per variant, by how many slow gaps).
TIMELINE_CAP = 100
# Slow gaps kept per request (its longest): a stream stalled every few tokens shows as such with 20.
SLOW_GAPS_KEPT = 20
# Without an ITL bound nothing is slow; the longest gaps are kept (drawn uncoloured) to show where a stream paused.
_LONGEST_WITHOUT_BOUND = 3


def itl_bound_ms(scenario: Scenario, variant: str) -> float | None:
    """The ITL bound a gap of `variant` is judged against: the smallest bound of the ITL SLOs that apply to the
    whole variant, else `goodput.itl_max_ms`, else None."""
    bounds = [
        s.max_ms
        for s in scenario.slos
        if s.metric == "itl" and s.max_ms is not None and s.variant in (None, variant) and s.mix is s.cls is None
    ]
    if bounds:
        return min(bounds)
    if scenario.goodput is not None and scenario.goodput.itl_max_ms is not None:
        return scenario.goodput.itl_max_ms
    return None


def _row(rec: RequestRecord, to_wall: float, bound_ms: float | None) -> dict[str, Any]:
    """One request as the report keeps it: wall times in seconds, gaps in ms from its send."""
    t, n = rec.chunk_times, rec.chunk_tokens
    gaps: list[tuple[float, float, float]] = []  # (per-token ms, start ms from send, chunk gap ms)
    for i in range(1, len(t)):
        g = (t[i] - t[i - 1]) * 1e3
        gaps.append((g / max(int(n[i]), 1), (t[i - 1] - rec.sent) * 1e3, g))
    if bound_ms is not None:
        slow = [x for x in gaps if x[0] > bound_ms]
        kept = heapq.nlargest(SLOW_GAPS_KEPT, slow)
    else:
        slow, kept = [], heapq.nlargest(_LONGEST_WITHOUT_BOUND, gaps)
    return {
        "mix": rec.mix,
        "scheduled": None if rec.scheduled is None else round(rec.scheduled + to_wall, 6),
        "sent": round(rec.sent + to_wall, 6),
        "first_token": None if not t else round(t[0] + to_wall, 6),
        "done": None if rec.done is None else round(rec.done + to_wall, 6),
        "outcome": "cut_by_stop" if rec.cut_by_stop else "cancelled" if rec.cancelled else (rec.error or "ok"),
        "fate": fate_name(rec),
        "tokens": int(sum(n)),
        "chunks": len(t),
        "max_gap_ms": round(max((g for _, _, g in gaps), default=0.0), 3) if gaps else None,
        "slow_gaps": len(slow),
        # [start ms from the send, chunk gap ms, per-token ms], in time order
        "gaps": [[round(s, 3), round(g, 3), round(p, 3)] for p, s, g in sorted(kept, key=lambda x: x[1])],
    }


class RequestTimelineSample:
    """Per variant, the `cap` requests of smallest seeded hash, as report rows (mergeable in any order)."""

    def __init__(self, seed: int = 0, cap: int = TIMELINE_CAP, bounds: dict[str, float | None] | None = None) -> None:
        self.seed = seed
        self.cap = cap
        self.bounds = bounds or {}
        # variant -> {hash: row}; a row carries its key and hash so that the master can merge without recomputing.
        self.kept: dict[str, dict[int, dict[str, Any]]] = {}
        self._fresh: dict[str, set[int]] = {}

    def _hash(self, key: str) -> int:
        return pair_hash(f"{self.seed}:{key}")

    def add(self, rec: RequestRecord, to_wall: float) -> None:
        """`to_wall`: what turns this process's monotonic times into wall-clock seconds."""
        if rec.warmup:
            return
        key = pair_key(rec) or rec.request_id
        h = self._hash(key)
        kept = self.kept.setdefault(rec.variant, {})
        if h in kept or (len(kept) >= self.cap and h >= max(kept)):
            return
        row = _row(rec, to_wall, self.bounds.get(rec.variant))
        self._admit(rec.variant, h, {"key": key, "h": h, **row})
        self._fresh.setdefault(rec.variant, set()).add(h)

    def _admit(self, variant: str, h: int, row: dict[str, Any]) -> None:
        kept = self.kept.setdefault(variant, {})
        kept[h] = row
        if len(kept) > self.cap:
            del kept[max(kept)]

    def pop_wire(self) -> dict[str, list[dict[str, Any]]]:
        """The rows that entered since the last call and are still kept."""
        out = {v: [self.kept[v][h] for h in sorted(hs) if h in self.kept.get(v, {})] for v, hs in self._fresh.items()}
        self._fresh = {}
        return {v: rows for v, rows in out.items() if rows}

    def merge_wire(self, wire: dict[str, list[dict[str, Any]]]) -> None:
        for variant, rows in wire.items():
            kept = self.kept.setdefault(variant, {})
            for row in rows:
                h = int(row["h"])
                if h not in kept and (len(kept) < self.cap or h < max(kept)):
                    self._admit(variant, h, row)

    def rows(self, variant: str) -> list[dict[str, Any]]:
        """The kept rows of `variant`, by send time."""
        return sorted(self.kept.get(variant, {}).values(), key=lambda r: (r["sent"], r["key"]))
