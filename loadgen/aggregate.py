"""Per-process aggregate of request records: histograms and counters per (variant, mix), mergeable.

A worker adds each finished `RequestRecord`, and every report interval ships `take_delta()`: what accumulated since
the last report, then starts afresh. The master adds deltas with `merge_wire`. Deltas make the merge idempotent with
respect to the worker's lifetime: a worker that dies has contributed exactly the reports that arrived, and nothing
is counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .histogram import LatencyHistogram, merge_encoded_into, record_chunk_gaps
from .records import RequestRecord

__all__ = ["METRICS", "Aggregate", "GroupStats", "WIRE_VERSION"]

METRICS: tuple[str, ...] = ("ttft", "itl", "icl", "tpot", "e2e", "queue_delay")
WIRE_VERSION = 2


def _add_counts(into: dict[str, int], other: dict[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


@dataclass(slots=True)
class GroupStats:
    hists: dict[str, LatencyHistogram] = field(default_factory=dict)
    requests: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    output_tokens: int = 0
    prompt_tokens: int = 0
    warmup_excluded: int = 0
    token_sources: dict[str, int] = field(default_factory=dict)

    def _hist(self, metric: str) -> LatencyHistogram:
        h = self.hists.get(metric)
        if h is None:
            h = self.hists[metric] = LatencyHistogram()
        return h

    def add(self, rec: RequestRecord) -> None:
        if rec.warmup:
            self.warmup_excluded += 1
            return
        self.requests += 1
        if rec.error is not None:
            self.errors[rec.error] = self.errors.get(rec.error, 0) + 1
            return
        self.ok += 1
        self.output_tokens += rec.output_token_count
        if rec.prompt_tokens is not None:
            self.prompt_tokens += rec.prompt_tokens
        self.token_sources[rec.token_source] = self.token_sources.get(rec.token_source, 0) + 1
        ttft = rec.ttft
        if ttft is not None:
            self._hist("ttft").record(ttft)
        e2e = rec.e2e
        if e2e is not None:
            self._hist("e2e").record(e2e)
        qd = rec.queue_delay
        if qd is not None:
            self._hist("queue_delay").record(qd)
        tpot = rec.tpot
        if tpot is not None:
            self._hist("tpot").record(tpot)
        t = rec.chunk_times
        if len(t) > 1:
            record_chunk_gaps(self._hist("itl"), self._hist("icl"), t, rec.chunk_tokens)

    def merge(self, other: GroupStats) -> None:
        for m, h in other.hists.items():
            self._hist(m).merge(h)
        self.requests += other.requests
        self.ok += other.ok
        _add_counts(self.errors, other.errors)
        self.output_tokens += other.output_tokens
        self.prompt_tokens += other.prompt_tokens
        self.warmup_excluded += other.warmup_excluded
        _add_counts(self.token_sources, other.token_sources)

    def reset_counters(self) -> None:
        """Zero the counters and keep the histograms (a report interval that ships counters only)."""
        self.requests = self.ok = self.output_tokens = self.prompt_tokens = self.warmup_excluded = 0
        self.errors = {}
        self.token_sources = {}

    def to_wire(self, histograms: bool = True) -> dict[str, Any]:
        # A histogram identical to another one (ICL = ITL whenever every chunk carries one token) is sent as an
        # alias: the master decodes it once and adds it to both.
        hists: dict[str, bytes] = {}
        alias: dict[str, str] = {}
        by_blob: dict[bytes, str] = {}
        for m, h in self.hists.items() if histograms else ():
            if not h.count:
                continue
            blob = h.encode()
            first = by_blob.setdefault(blob, m)
            if first == m:
                hists[m] = blob
            else:
                alias[m] = first
        return {
            "hists": hists,
            "alias": alias,
            "requests": self.requests,
            "ok": self.ok,
            "errors": dict(self.errors),
            "output_tokens": self.output_tokens,
            "prompt_tokens": self.prompt_tokens,
            "warmup_excluded": self.warmup_excluded,
            "token_sources": dict(self.token_sources),
        }

    def merge_wire(self, w: dict[str, Any]) -> None:
        alias: dict[str, str] = w.get("alias", {})
        for m, blob in w.get("hists", {}).items():
            merge_encoded_into(blob, [self._hist(m), *(self._hist(a) for a, src in alias.items() if src == m)])
        self.requests += int(w.get("requests", 0))
        self.ok += int(w.get("ok", 0))
        _add_counts(self.errors, w.get("errors", {}))
        self.output_tokens += int(w.get("output_tokens", 0))
        self.prompt_tokens += int(w.get("prompt_tokens", 0))
        self.warmup_excluded += int(w.get("warmup_excluded", 0))
        _add_counts(self.token_sources, w.get("token_sources", {}))


class Aggregate:
    """Groups keyed by (variant, mix), plus a per-second timeline of completions (wall-clock seconds)."""

    __slots__ = ("groups", "timeline")

    def __init__(self) -> None:
        self.groups: dict[tuple[str, str], GroupStats] = {}
        self.timeline: dict[int, list[int]] = {}

    def group(self, variant: str, mix: str) -> GroupStats:
        key = (variant, mix)
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = GroupStats()
        return g

    def add(self, rec: RequestRecord, wall_time: float) -> None:
        self.group(rec.variant, rec.mix).add(rec)
        if rec.warmup:
            return
        sec = int(wall_time)
        row = self.timeline.get(sec)
        if row is None:
            row = self.timeline[sec] = [0, 0, 0]
        row[0] += 1
        if rec.error is None:
            row[1] += 1
            row[2] += rec.output_token_count

    def is_empty(self) -> bool:
        return not self.groups and not self.timeline

    def to_wire(self) -> dict[str, Any]:
        return {
            "v": WIRE_VERSION,
            "groups": [[v, m, g.to_wire()] for (v, m), g in self.groups.items()],
            "timeline": [[s, *row] for s, row in self.timeline.items()],
        }

    def take_delta(self, histograms: bool = True) -> dict[str, Any]:
        """What accumulated since the last delta. `histograms=False` ships the counters and timeline only and keeps
        the histograms accumulating for a later delta: merging histograms is most of the master's work per report,
        so with many workers each sends them every few intervals (see `Runtime.hist_every`)."""
        if histograms:
            wire = self.to_wire()
            self.groups = {}
        else:
            wire = {
                "v": WIRE_VERSION,
                "groups": [[v, m, g.to_wire(histograms=False)] for (v, m), g in self.groups.items()],
                "timeline": [[s, *row] for s, row in self.timeline.items()],
            }
            for g in self.groups.values():
                g.reset_counters()
        self.timeline = {}
        return wire

    def merge(self, other: Aggregate) -> None:
        for (v, m), g in other.groups.items():
            self.group(v, m).merge(g)
        self._merge_timeline([[s, *row] for s, row in other.timeline.items()])

    def merge_wire(self, wire: dict[str, Any]) -> None:
        if wire.get("v") != WIRE_VERSION:
            raise ValueError(f"aggregate wire version {wire.get('v')!r}, expected {WIRE_VERSION}")
        for v, m, gw in wire.get("groups", []):
            self.group(v, m).merge_wire(gw)
        self._merge_timeline(wire.get("timeline", []))

    def _merge_timeline(self, rows: list[list[int]]) -> None:
        for s, req, ok, tok in rows:
            row = self.timeline.get(s)
            if row is None:
                self.timeline[s] = [req, ok, tok]
            else:
                row[0] += req
                row[1] += ok
                row[2] += tok

    def variants(self) -> list[str]:
        return sorted({v for v, _ in self.groups})

    def merged_variant(self, variant: str) -> GroupStats:
        """All mixes of one variant together."""
        out = GroupStats()
        for (v, _), g in self.groups.items():
            if v == variant:
                out.merge(g)
        return out
