"""Per-process aggregate of request records: histograms and counters per (variant, mix), mergeable; the same per
(variant, priority class) when the scenario has classes, and per (variant, adapter) for variants with LoRA adapters.

A worker adds each finished `RequestRecord`, and every report interval ships `pop_delta()`: what accumulated since
the last report, then starts afresh. The master adds deltas with `merge_wire`. Deltas make the merge idempotent with
respect to the worker's lifetime: a worker that dies has contributed exactly the reports that arrived, and nothing
is counted twice.
"""

from __future__ import annotations

import math
from typing import Any

from loadgen.measure.fates import FATES, NOT_SENT, fate_of, latencies
from loadgen.measure.group_stats import CENSORED_METRICS, CONNECTION_METRICS, GroupStats, group_at, merge_group_rows
from loadgen.measure.latency_samples import LatencySamples
from loadgen.measure.outputs import OutputSamples
from loadgen.measure.pairs import PairSamples
from loadgen.measure.records import RequestRecord
from loadgen.measure.sessions import SessionPairs, SessionStats, SessionTally, SessionTimelines
from loadgen.measure.slices import BucketStats, merge_slices, slice_at, slices_wire
from loadgen.measure.timeline import Timeline
from loadgen.metric_names import METRICS

__all__ = [
    "BUCKET_METRICS",
    "CENSORED_METRICS",
    "CONNECTION_METRICS",
    "METRICS",
    "NOT_SENT",
    "Aggregate",
    "BucketStats",
    "GroupStats",
    "WIRE_VERSION",
]

# 7: the per-variant timeline (measure/timeline.py). 8: per (variant, priority class) groups ("classes"). 9: samples
# for the variants' paired comparison ("pairs", measure/pairs.py). 10: per (variant, LoRA adapter) ("adapters").
# 11: agent sessions per (variant, mix) ("sessions", measure/sessions.py). 12: a few sessions per variant step by
# step, for the HTML report's timeline ("session_timelines"), and the replayed agent traces' schedule slip in each
# sessions entry ("slip"). 13: the hash-sampled rows (pairs, session_pairs, latency_samples) packed, each array
# base64 of little-endian int64 (measure/hash_sample.py `pack`), not lists of integers. 14: histograms as their raw
# V2 payload (measure/histogram.py `wire`: no zlib, no base64).
WIRE_VERSION = 14
# What a (variant, mix, bucket) and a (variant, mix, turn) keep: few histograms, so these add little to each delta.
BUCKET_METRICS: tuple[str, ...] = ("ttft", "e2e")
# The maps of `BucketStats` by (variant, mix, bucket / turn / images carried); on the wire, [*key, stats] rows.
_SLICES = ("buckets", "turns", "images")


class Aggregate:
    """Groups keyed by (variant, mix), buckets keyed by (variant, mix, bucket), session turns keyed by (variant, mix,
    turn) (requests of no session have none), plus a per-second timeline of completions (wall-clock seconds) and
    the per-variant timeline the HTML report's charts over time are drawn from (`variant_timeline`).

    `classes`: what a group keeps, keyed by (variant, priority class), for scenarios with `traffic.classes` (a
    record of the implicit class, `priority_class == ""`, adds to none: its numbers are the variant's). Every metric,
    censoring and token count as for a group, so an SLO can name a class; not per mix as well (each request would
    then be added three times). Open-loop arrival counts stay with the groups. `adapters`: the same, keyed by
    (variant, adapter), for variants with LoRA adapters (`RequestRecord.adapter`; "" adds to none).
    """

    __slots__ = (
        "groups",
        "buckets",
        "turns",
        "images",
        "classes",
        "adapters",
        "starts",
        "sessions",
        "session_pairs",
        "session_timelines",
        "timeline",
        "variant_timeline",
        "pairs",
        "outputs",
        "latency_samples",
        "window_start",
        "window_end",
    )

    def __init__(self, window_start: float = -math.inf) -> None:
        self.groups: dict[tuple[str, str], GroupStats] = {}
        self.buckets: dict[tuple[str, str, str], BucketStats] = {}
        self.turns: dict[tuple[str, str, int], BucketStats] = {}
        self.images: dict[tuple[str, str, int], BucketStats] = {}  # (variant, mix, images it carried)
        self.classes: dict[tuple[str, str], GroupStats] = {}
        self.adapters: dict[tuple[str, str], GroupStats] = {}
        self.starts: dict[tuple[str, str], BucketStats] = {}  # (variant, "warm" or `RequestRecord.cold`)
        self.sessions: dict[tuple[str, str], SessionStats] = {}  # agent sessions by (variant, mix)
        self.session_pairs = SessionPairs()  # hash-sampled sessions by task, for their paired comparison
        self.session_timelines = SessionTimelines()  # a few of them step by step, for the HTML report's timeline
        self.timeline: dict[int, list[int]] = {}
        self.variant_timeline = Timeline()
        # Hash-sampled per-request values, for the variants' paired comparison (report/compare.py).
        self.pairs = PairSamples()
        self.latency_samples = LatencySamples()  # a bounded sample of requests, for the latency fit
        # Hash-sampled reply texts (kept only with `quality:`), for agreement with the baseline (report/quality.py).
        self.outputs = OutputSamples()
        # The measured window (monotonic): where this process's warm-up ended, and where its stop began (set at
        # the stop; what completes after it, in the drain, is measured but outside throughput).
        self.window_start = window_start
        self.window_end = math.inf

    def group(self, variant: str, mix: str) -> GroupStats:
        return group_at(self.groups, (variant, mix))

    def bucket(self, variant: str, mix: str, bucket: str) -> BucketStats:
        key = (variant, mix, bucket)
        return self.buckets.get(key) or self.buckets.setdefault(key, BucketStats())

    def turn(self, variant: str, mix: str, turn: int) -> BucketStats:
        return self.turns.get((variant, mix, turn)) or self.turns.setdefault((variant, mix, turn), BucketStats())

    def priority_class(self, variant: str, cls: str) -> GroupStats:
        return group_at(self.classes, (variant, cls))

    def adapter(self, variant: str, name: str) -> GroupStats:
        return group_at(self.adapters, (variant, name))

    def start(self, variant: str, state: str) -> BucketStats:
        return self.starts.get((variant, state)) or self.starts.setdefault((variant, state), BucketStats())

    def session(self, variant: str, mix: str) -> SessionStats:
        return self.sessions.get((variant, mix)) or self.sessions.setdefault((variant, mix), SessionStats())

    def add_session(self, tally: SessionTally, judged: bool) -> None:
        """An agent task that ended, after its steps' records were added (measure/sessions.py)."""
        fate = self.session(tally.variant, tally.mix).add(tally, self.window_end, judged)
        self.session_pairs.add(tally, fate)
        self.session_timelines.add(tally, fate)

    def add(self, rec: RequestRecord, wall_time: float) -> None:
        # Its fate and latencies asked once (measure/fates.py), for every group and slice it adds to.
        fate = fate_of(rec, self.window_end)
        fate_row = FATES[fate]
        lat = latencies(rec, fate_row)
        start, end = self.window_start, self.window_end
        self.group(rec.variant, rec.mix).add(rec, start, end, fate, lat)
        if rec.priority_class:  # warm-up and cut-by-stop requests too: a group counts them as such
            self.priority_class(rec.variant, rec.priority_class).add(rec, start, end, fate, lat)
        if rec.adapter:
            self.adapter(rec.variant, rec.adapter).add(rec, start, end, fate, lat)
        self.variant_timeline.add(rec, wall_time, start, fate_row)
        self.pairs.add(rec, fate_row, lat)
        if fate_row.complete:
            self.latency_samples.add(rec, wall_time)
            self.outputs.add(rec)
        if fate_row.slices:
            self.start(rec.variant, rec.cold or "warm").add(rec, fate_row, lat)
            if rec.bucket:
                self.bucket(rec.variant, rec.mix, rec.bucket).add(rec, fate_row, lat)
            if rec.turn:
                self.turn(rec.variant, rec.mix, rec.turn).add(rec, fate_row, lat)
            if rec.images is not None:
                slice_at(self.images, (rec.variant, rec.mix, rec.images)).add(rec, fate_row, lat)
        if not fate_row.in_timeline:
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
        slices = (
            self.groups,
            self.buckets,
            self.turns,
            self.classes,
            self.adapters,
            self.starts,
            self.sessions,
            self.timeline,
        )
        samples = (
            self.variant_timeline,
            self.pairs,
            self.session_pairs,
            self.session_timelines,
            self.latency_samples,
            self.outputs,
        )
        return not any(slices) and all(s.is_empty() for s in samples)

    def to_wire(self, histograms: bool = True) -> dict[str, Any]:
        return {
            "v": WIRE_VERSION,
            "groups": [[v, m, g.to_wire(histograms)] for (v, m), g in self.groups.items()],
            **{name: slices_wire(getattr(self, name), histograms) for name in _SLICES},
            "classes": [[v, c, cs.to_wire(histograms)] for (v, c), cs in self.classes.items()],
            "adapters": [[v, a, s.to_wire(histograms)] for (v, a), s in self.adapters.items()],
            "starts": [[v, st, ss.to_wire(histograms)] for (v, st), ss in self.starts.items()],
            "sessions": [[v, m, ss.to_wire()] for (v, m), ss in self.sessions.items()],
            "timeline": [[s, *row] for s, row in self.timeline.items()],
            "variant_timeline": self.variant_timeline.to_wire(),
            "pairs": self.pairs.to_wire(),
            "session_pairs": self.session_pairs.to_wire(),
            "session_timelines": self.session_timelines.to_wire(),
            "latency_samples": self.latency_samples.to_wire(),
            "outputs": self.outputs.to_wire(),
        }

    def pop_delta(self, histograms: bool = True) -> dict[str, Any]:
        """What accumulated since the last delta. `histograms=False` ships the counters and timeline only and keeps
        the histograms accumulating for a later delta: merging histograms is most of the master's work per report,
        so with many workers each sends them every few intervals (see `Runtime.hist_every`)."""
        wire = self.to_wire(histograms)
        if histograms:
            self.groups = {}
            self.buckets, self.turns, self.images = {}, {}, {}
            self.classes = {}
            self.adapters = {}
            self.starts = {}
        else:
            for g in (*self.groups.values(), *self.classes.values(), *self.adapters.values()):
                g.reset_counters()
            for bs in (*self.buckets.values(), *self.turns.values(), *self.images.values(), *self.starts.values()):
                bs.reset_counters()
        self.sessions = {}  # few and small: shipped whole every delta
        self.timeline = {}
        self.variant_timeline = Timeline()
        self.pairs.clear_rows()  # every delta: few values per request, and the level must go on rising
        self.session_pairs.clear_rows()
        self.session_timelines.clear_rows()
        self.latency_samples.clear_rows()
        self.outputs.clear_rows()
        return wire

    def merge(self, other: Aggregate) -> None:
        for (v, m), g in other.groups.items():
            self.group(v, m).merge(g)
        for name in _SLICES:
            merge_slices(getattr(self, name), getattr(other, name))
        for (v, c), cs in other.classes.items():
            self.priority_class(v, c).merge(cs)
        for (v, a), s in other.adapters.items():
            self.adapter(v, a).merge(s)
        for (v, st), ss in other.starts.items():
            self.start(v, st).merge(ss)
        for (v, m), sess in other.sessions.items():
            self.session(v, m).merge(sess)
        self._merge_timeline([[s, *row] for s, row in other.timeline.items()])
        self.variant_timeline.merge(other.variant_timeline)
        self.pairs.merge(other.pairs)
        self.session_pairs.merge(other.session_pairs)
        self.session_timelines.merge(other.session_timelines)
        self.latency_samples.merge(other.latency_samples)
        self.outputs.merge(other.outputs)

    def merge_wire(self, wire: dict[str, Any]) -> None:
        if wire.get("v") != WIRE_VERSION:
            raise ValueError(f"aggregate wire version {wire.get('v')!r}, expected {WIRE_VERSION}")
        merge_group_rows(self.groups, wire.get("groups", []))
        for name in _SLICES:
            merge_slices(getattr(self, name), wire.get(name, []))
        merge_group_rows(self.classes, wire.get("classes", []))
        merge_group_rows(self.adapters, wire.get("adapters", []))
        merge_slices(self.starts, wire.get("starts", []), nkey=2)
        for v, m, sw in wire.get("sessions", []):
            self.session(v, m).merge_wire(sw)
        self._merge_timeline(wire.get("timeline", []))
        self.variant_timeline.merge_wire(wire.get("variant_timeline", {}))
        self.pairs.merge_wire(wire.get("pairs", {}))
        self.session_pairs.merge_wire(wire.get("session_pairs", {}))
        self.session_timelines.merge_wire(wire.get("session_timelines", {}))
        self.latency_samples.merge_wire(wire.get("latency_samples", {}))
        self.outputs.merge_wire(wire.get("outputs", {}))

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
