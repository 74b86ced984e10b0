"""A slice of one variant's traffic kept with few histograms: a (variant, mix, bucket), a session's turn, a cold or
warm start (see `Aggregate`), and the tokens a record streamed inside the window. Apart from aggregate.py so that
neither passes 500 lines."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from loadgen.measure.fates import RECORDED_METRICS, FateRow, LatencyPlan, latencies
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.recording import record_values
from loadgen.measure.records import RequestRecord
from loadgen.measure.wire_fields import COUNTER, COUNTS, add_counts, merge_rows, merge_stats

__all__ = ["BucketStats", "merge_slices", "slice_at", "slices_wire", "tokens_in_window"]

# What a slice keeps of a record's latencies (`Aggregate.BUCKET_METRICS`), and where `fates.latencies` has them.
_METRICS = ("ttft", "e2e")
_AT = tuple(RECORDED_METRICS.index(m) for m in _METRICS)


def tokens_in_window(rec: RequestRecord, start: float, end: float = math.inf) -> int:
    """Tokens of the chunks that arrived in [`start`, `end`] (all of them when the request lies inside); a whole
    reply's (`streamed` False: its usage's count) when it arrived in there, a successful one's."""
    if not rec.streamed:
        done = rec.done
        whole = rec.error is None and not rec.cut_by_stop and done is not None and start <= done <= end
        return rec.output_token_count if whole else 0
    t, n = rec.chunk_times, rec.chunk_tokens
    if not t or (t[0] >= start and t[-1] <= end):
        return sum(n)
    return sum(k for ti, k in zip(t, n, strict=False) if start <= ti <= end)


@dataclass(slots=True)
class BucketStats:
    """One (variant, mix, bucket) (a mix's length class: short / medium / long), or one (variant, mix, turn) of a
    multi-turn session: requests, successes, and TTFT / E2E with the same censoring as `GroupStats` (a failed
    request is a censored E2E sample, and a censored TTFT sample when it failed before its first token); the prompt
    tokens the server reported over the successful requests that reported them (their mean is exact: a sum and a
    count, no histogram). Requests of the window only; one the client or the stop ended is in TTFT and E2E as its fate
    says, not in `requests`."""

    hists: dict[str, LatencyHistogram] = field(default_factory=dict)
    requests: int = 0
    ok: int = 0
    censored: dict[str, int] = field(default_factory=dict)
    prompt_reported: int = 0
    prompt_tokens: int = 0

    def _hist(self, metric: str) -> LatencyHistogram:
        h = self.hists.get(metric)
        if h is None:
            h = self.hists[metric] = LatencyHistogram()
        return h

    def add(
        self, rec: RequestRecord, row: FateRow, lat: tuple[LatencyPlan, tuple[float | None, ...]] | None = None
    ) -> None:
        """A record of the window, as its fate's row says (measure/fates.py; `lat`: its `fates.latencies`, when the
        caller has them already)."""
        plan, values = lat or latencies(rec, row)
        for metric in plan.censored:
            if metric in _METRICS:
                self.censored[metric] = self.censored.get(metric, 0) + 1
        ttft_at, e2e_at = _AT
        record_values(self.hists, self._hist, _METRICS, (values[ttft_at], values[e2e_at]))
        if row.outcome == "neither":
            return
        self.requests += 1
        if row.outcome != "success":
            return
        self.ok += 1
        if rec.prompt_tokens is not None:
            self.prompt_reported += 1
            self.prompt_tokens += rec.prompt_tokens

    def merge(self, other: BucketStats) -> None:
        for m, h in other.hists.items():
            self._hist(m).merge(h)
        for name in _SLICE_COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        add_counts(self.censored, other.censored)

    def reset_counters(self) -> None:
        for name in _SLICE_COUNTERS:
            setattr(self, name, 0)
        self.censored = {}

    def to_wire(self, histograms: bool = True) -> dict[str, Any]:
        hists = {m: h.wire() for m, h in self.hists.items() if h.count} if histograms else {}
        return {
            "hists": hists,
            **{name: getattr(self, name) for name in _SLICE_COUNTERS},
            "censored": dict(self.censored),
        }

    def merge_wire(self, w: dict[str, Any]) -> None:
        merge_stats(self, w, _SLICE_WIRE_KIND, self._hist, alias=False)


_SLICE_COUNTERS = ("requests", "ok", "prompt_reported", "prompt_tokens")
_SLICE_WIRE_KIND = {**dict.fromkeys(_SLICE_COUNTERS, COUNTER), "censored": COUNTS}


def slice_at(slices: dict[Any, BucketStats], key: tuple[Any, ...]) -> BucketStats:
    """The slice at `key` of a map of slices (an empty one on first use)."""
    s = slices.get(key)
    if s is None:
        s = slices[key] = BucketStats()
    return s


def slices_wire(slices: dict[Any, BucketStats], histograms: bool) -> list[list[Any]]:
    """A map of slices on the wire: one `[*key, stats]` row per slice."""
    return [[*key, s.to_wire(histograms)] for key, s in slices.items()]


def merge_slices(into: dict[Any, BucketStats], other: dict[Any, BucketStats] | list[list[Any]], nkey: int = -1) -> None:
    """Add another map of slices into `into`: the map itself, or its wire rows (`slices_wire`; `nkey`, the length of
    their keys where it is fixed: -1 for any)."""
    if isinstance(other, dict):
        for key, s in other.items():
            slice_at(into, key).merge(s)
        return

    def one(row: Any) -> None:
        *key, w = row
        if nkey >= 0 and len(key) != nkey:
            raise ValueError(f"a slice's wire row: {nkey} key(s) and its stats, got {len(key)} key(s)")
        slice_at(into, tuple(key)).merge_wire(w)

    merge_rows(into, other, nkey, BucketStats, _SLICE_WIRE_KIND, False, one)
