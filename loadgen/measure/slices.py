"""A slice of one variant's traffic kept with few histograms: a (variant, mix, bucket), a session's turn, a cold or
warm start (see `Aggregate`). Apart from aggregate.py so that neither passes 500 lines."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadgen.measure.histogram import LatencyHistogram, merge_encoded_into
from loadgen.measure.records import RequestRecord

__all__ = ["BucketStats", "add_counts"]


def add_counts(into: dict[str, int], other: dict[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


@dataclass(slots=True)
class BucketStats:
    """One (variant, mix, bucket) (a mix's length class: short / medium / long), or one (variant, mix, turn) of a
    multi-turn session: requests, successes, and TTFT / E2E with the same censoring as `GroupStats` (a failed
    request is a censored E2E sample, and a censored TTFT sample when it failed before its first token); the prompt
    tokens the server reported over the successful requests that reported them (their mean is exact: a sum and a
    count, no histogram). Warm-up and cut-by-stop requests are not counted."""

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

    def add(self, rec: RequestRecord) -> None:
        self.requests += 1
        ttft = rec.ttft
        if ttft is not None:
            self._hist("ttft").record(ttft)
        elif rec.error is not None:
            self.censored["ttft"] = self.censored.get("ttft", 0) + 1
        if rec.error is not None:
            self.censored["e2e"] = self.censored.get("e2e", 0) + 1
            return
        self.ok += 1
        e2e = rec.e2e
        if e2e is not None:
            self._hist("e2e").record(e2e)
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
        hists = {m: h.encode() for m, h in self.hists.items() if h.count} if histograms else {}
        return {
            "hists": hists,
            **{name: getattr(self, name) for name in _SLICE_COUNTERS},
            "censored": dict(self.censored),
        }

    def merge_wire(self, w: dict[str, Any]) -> None:
        for m, blob in w.get("hists", {}).items():
            merge_encoded_into(blob, [self._hist(m)])
        for name in _SLICE_COUNTERS:
            setattr(self, name, getattr(self, name) + int(w.get(name, 0)))
        add_counts(self.censored, w.get("censored", {}))


_SLICE_COUNTERS = ("requests", "ok", "prompt_reported", "prompt_tokens")
