"""Per-process aggregate of request records: histograms and counters per (variant, mix), mergeable; the same per
(variant, priority class) when the scenario has classes.

A worker adds each finished `RequestRecord`, and every report interval ships `pop_delta()`: what accumulated since
the last report, then starts afresh. The master adds deltas with `merge_wire`. Deltas make the merge idempotent with
respect to the worker's lifetime: a worker that dies has contributed exactly the reports that arrived, and nothing
is counted twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from loadgen.measure.histogram import LatencyHistogram, merge_encoded_into, record_chunk_gaps
from loadgen.measure.pairs import PairSamples
from loadgen.measure.records import RequestRecord
from loadgen.measure.slices import BucketStats, add_counts
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

# Opening a connection: beside TTFT, not in it (TTFT runs from the request write).
CONNECTION_METRICS: tuple[str, ...] = ("connect", "tls")
# The error class of an open-loop arrival that was never sent (`GroupStats.add_not_sent`).
NOT_SENT = "not_sent"
# Metrics where a request that never got there is a censored sample (above everything measured).
CENSORED_METRICS: tuple[str, ...] = ("ttft", "e2e", "ttft_from_schedule", "e2e_from_schedule")
# 7: the per-variant timeline (measure/timeline.py). 8: per (variant, priority class) groups ("classes").
# 9: per-request samples for the variants' paired comparison ("pairs", measure/pairs.py).
WIRE_VERSION = 9
# What a (variant, mix, bucket) and a (variant, mix, turn) keep: few histograms, so these levels add little to each
# delta.
BUCKET_METRICS: tuple[str, ...] = ("ttft", "e2e")
_COUNTERS = (
    "requests",
    "ok",
    "output_tokens",
    "prompt_tokens",
    "cache_reported",
    "cache_prompt_tokens",
    "cached_prompt_tokens",
    "target_prompt_tokens",
    "shared_prefix_tokens",
    "warmup_excluded",
    "cut_by_stop",
    "drained",
    "drained_ok",
    "drained_good",
    "ok_without_tokens",
    "goodput_judged",
    "goodput_ok",
)
_COUNTS = ("errors", "token_sources", "censored", "finish_reasons", "arrivals", "goodput_misses")


def _tokens_from(rec: RequestRecord, start: float, end: float = math.inf) -> int:
    """Tokens of the chunks that arrived in [`start`, `end`] (all of them when the request lies inside)."""
    t, n = rec.chunk_times, rec.chunk_tokens
    if not t or (t[0] >= start and t[-1] <= end):
        return sum(n)
    return sum(k for ti, k in zip(t, n, strict=False) if start <= ti <= end)


@dataclass(slots=True)
class GroupStats:
    """One (variant, mix) over the measured window.

    A request belongs to the window when it completed inside it (`requests`, `ok`, `errors`, latency samples);
    throughput counts the tokens whose chunks arrived inside it, whichever request carried them — a request sent
    during the warm-up adds the tokens it streamed after it, one still running at the stop (`cut_by_stop`) the
    tokens it streamed before. A failed request is an error of its class; one that failed before its first token is
    a censored TTFT sample, and every failed request a censored E2E sample (see `LatencyHistogram.summary_ms`).
    """

    hists: dict[str, LatencyHistogram] = field(default_factory=dict)
    requests: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    output_tokens: int = 0
    prompt_tokens: int = 0
    # Successful requests whose server said how many prompt tokens it served from its prefix cache, their prompt
    # tokens, and the cached ones among them: the cached share is over these requests only.
    cache_reported: int = 0
    cache_prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    # The prompt lengths asked for and their shared-prefix part, over the requests in the window.
    target_prompt_tokens: int = 0
    shared_prefix_tokens: int = 0
    warmup_excluded: int = 0
    # Still running when the drain ended (`load.drain`): censored in E2E (and TTFT without a first token), their
    # age at the cut in the "cut_age" histogram.
    cut_by_stop: int = 0
    # Completed during the drain (after the window's end): in the latencies and the success rate, not in
    # requests/s (throughput is over the window); `drained_ok` of them succeeded.
    drained: int = 0
    drained_ok: int = 0
    drained_good: int = 0  # of the drained, those that met every per-request SLO (goodput/s is over the window too)
    ok_without_tokens: int = 0
    token_sources: dict[str, int] = field(default_factory=dict)
    censored: dict[str, int] = field(default_factory=dict)
    finish_reasons: dict[str, int] = field(default_factory=dict)
    # Open loop only: what became of the scheduled arrivals, by when it happened — `sent` / `dropped` (overflow:
    # drop) inside the window, `in_warmup` (sent or dropped before it), `unsent_at_stop` (queued or handed to a
    # user, never written, when the run stopped). Filled by the Locust runtime, which knows the schedule.
    arrivals: dict[str, int] = field(default_factory=dict)
    # Per-request SLOs (`goodput:`): successful requests judged, those that met every bound, and per bound the
    # requests that missed it.
    goodput_judged: int = 0
    goodput_ok: int = 0
    goodput_misses: dict[str, int] = field(default_factory=dict)

    def _hist(self, metric: str) -> LatencyHistogram:
        h = self.hists.get(metric)
        if h is None:
            h = self.hists[metric] = LatencyHistogram()
        return h

    def _censor(self, metric: str) -> None:
        self.censored[metric] = self.censored.get(metric, 0) + 1

    def add(self, rec: RequestRecord, window_start: float = -math.inf, window_end: float = math.inf) -> None:
        if rec.cut_by_stop:
            self._add_cut(rec, window_start, window_end)
            return
        if rec.warmup:
            self.warmup_excluded += 1
            self.output_tokens += _tokens_from(rec, window_start, window_end)
            return
        self.requests += 1
        if rec.done is not None and rec.done > window_end:
            self.drained += 1
            self.drained_ok += rec.error is None
        self.target_prompt_tokens += rec.prompt_tokens_target
        self.shared_prefix_tokens += rec.shared_prefix_tokens
        tokens = _tokens_from(rec, window_start, window_end)
        if rec.connect_s is not None:
            self._hist("connect").record(rec.connect_s)
        if rec.tls_s is not None:
            self._hist("tls").record(rec.tls_s)
        t = rec.chunk_times
        qd = rec.queue_delay
        if qd is not None:  # a failed open-loop request went out late all the same
            self._hist("queue_delay").record(qd)
        if rec.error is not None:
            self.errors[rec.error] = self.errors.get(rec.error, 0) + 1
            self.output_tokens += tokens
            ttft = rec.ttft
            if ttft is None:
                self._censor("ttft")
                if rec.scheduled is not None:
                    self._censor("ttft_from_schedule")
            else:
                self._hist("ttft").record(ttft)
                if rec.scheduled is not None:
                    self._hist("ttft_from_schedule").record(rec.chunk_times[0] - rec.scheduled)
            self._censor("e2e")
            if rec.scheduled is not None:
                self._censor("e2e_from_schedule")
            if len(t) > 1:  # the gaps it did stream are real gaps
                record_chunk_gaps(self._hist("itl"), self._hist("icl"), t, rec.chunk_tokens)
            return
        self.ok += 1
        misses = rec.goodput_misses
        if misses is not None:
            self.goodput_judged += 1
            if misses:
                add_counts(self.goodput_misses, dict.fromkeys(misses, 1))
            else:
                self.goodput_ok += 1
                if rec.done is not None and rec.done > window_end:
                    self.drained_good += 1
        # The server's usage may count a token that never came as a chunk (EOS with an empty delta).
        usage_extra = rec.output_token_count - rec.tokens_received
        self.output_tokens += tokens + max(usage_extra, 0)
        if rec.prompt_tokens is not None:
            self.prompt_tokens += rec.prompt_tokens
            if rec.cached_prompt_tokens is not None:
                self.cache_reported += 1
                self.cache_prompt_tokens += rec.prompt_tokens
                self.cached_prompt_tokens += rec.cached_prompt_tokens
        self.token_sources[rec.token_source] = self.token_sources.get(rec.token_source, 0) + 1
        reason = rec.finish_reason or "unknown"
        self.finish_reasons[reason] = self.finish_reasons.get(reason, 0) + 1
        ttft = rec.ttft
        if ttft is not None:
            self._hist("ttft").record(ttft)
            if rec.scheduled is not None:
                self._hist("ttft_from_schedule").record(rec.chunk_times[0] - rec.scheduled)
        else:
            self.ok_without_tokens += 1
        e2e = rec.e2e
        if e2e is not None:
            self._hist("e2e").record(e2e)
        if rec.scheduled is not None and rec.done is not None:
            # What a user of an open-loop service waits: from when the request was due, queueing at the client included.
            self._hist("e2e_from_schedule").record(rec.done - rec.scheduled)
        tpot = rec.tpot
        if tpot is not None:
            self._hist("tpot").record(tpot)
        if len(t) > 1:
            record_chunk_gaps(self._hist("itl"), self._hist("icl"), t, rec.chunk_tokens)

    def _add_cut(self, rec: RequestRecord, window_start: float, window_end: float) -> None:
        """A request the stop cut after the drain: it had run `done − sent` at least, so it is a censored sample of
        E2E (above every measured one: a p99 must not improve because the slowest requests were still running), and
        of TTFT when no token had come; a TTFT it did measure is kept. Not in the success rate: it neither
        succeeded nor failed. Its tokens inside the window count for throughput."""
        self.cut_by_stop += 1
        self.output_tokens += _tokens_from(rec, window_start, window_end)
        if rec.warmup or rec.done is None:
            return
        self._hist("cut_age").record(rec.done - (rec.scheduled if rec.scheduled is not None else rec.sent))
        ttft = rec.ttft
        if ttft is None:
            self._censor("ttft")
        else:
            self._hist("ttft").record(ttft)
        self._censor("e2e")
        if rec.scheduled is not None:
            if ttft is None:
                self._censor("ttft_from_schedule")
            else:
                self._hist("ttft_from_schedule").record(rec.chunk_times[0] - rec.scheduled)
            self._censor("e2e_from_schedule")

    def add_not_sent(self) -> None:
        """An open-loop arrival of the window that was never sent (dropped: every sender was busy; or still waiting
        for one at the stop): a failed request of its own class, `not_sent`, in the success rate, and a censored
        sample of every latency it would have had (above every measured one)."""
        self.requests += 1
        self.errors[NOT_SENT] = self.errors.get(NOT_SENT, 0) + 1
        for metric in CENSORED_METRICS:
            self._censor(metric)

    def merge(self, other: GroupStats) -> None:
        for m, h in other.hists.items():
            self._hist(m).merge(h)
        for name in _COUNTERS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in _COUNTS:
            add_counts(getattr(self, name), getattr(other, name))

    def reset_counters(self) -> None:
        """Zero the counters and keep the histograms (a report interval that ships counters only)."""
        for name in _COUNTERS:
            setattr(self, name, 0)
        for name in _COUNTS:
            setattr(self, name, {})

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
        out: dict[str, Any] = {"hists": hists, "alias": alias}
        for name in _COUNTERS:
            out[name] = getattr(self, name)
        for name in _COUNTS:
            out[name] = dict(getattr(self, name))
        return out

    def merge_wire(self, w: dict[str, Any]) -> None:
        alias: dict[str, str] = w.get("alias", {})
        for m, blob in w.get("hists", {}).items():
            merge_encoded_into(blob, [self._hist(m), *(self._hist(a) for a, src in alias.items() if src == m)])
        for name in _COUNTERS:
            setattr(self, name, getattr(self, name) + int(w.get(name, 0)))
        for name in _COUNTS:
            add_counts(getattr(self, name), w.get(name, {}))


class Aggregate:
    """Groups keyed by (variant, mix), buckets keyed by (variant, mix, bucket), session turns keyed by (variant, mix,
    turn) (requests of no session have none), plus a per-second timeline of completions (wall-clock seconds) and
    the per-variant timeline the HTML report's charts over time are drawn from (`variant_timeline`).

    `classes`: what a group keeps, keyed by (variant, priority class), for scenarios with `traffic.classes` (a
    record of the implicit class, `priority_class == ""`, adds to none: its numbers are the variant's). Every metric,
    censoring and token count as for a group, so an SLO can name a class; not per mix as well (each request would
    then be added three times). Open-loop arrival counts stay with the groups.
    """

    __slots__ = (
        "groups",
        "buckets",
        "turns",
        "classes",
        "starts",
        "timeline",
        "variant_timeline",
        "pairs",
        "window_start",
        "window_end",
    )

    def __init__(self, window_start: float = -math.inf) -> None:
        self.groups: dict[tuple[str, str], GroupStats] = {}
        self.buckets: dict[tuple[str, str, str], BucketStats] = {}
        self.turns: dict[tuple[str, str, int], BucketStats] = {}
        self.classes: dict[tuple[str, str], GroupStats] = {}
        self.starts: dict[tuple[str, str], BucketStats] = {}  # (variant, "warm" or `RequestRecord.cold`)
        self.timeline: dict[int, list[int]] = {}
        self.variant_timeline = Timeline()
        # Hash-sampled per-request values, for the variants' paired comparison (report/compare.py).
        self.pairs = PairSamples()
        # The measured window (monotonic): where this process's warm-up ended, and where its stop began (set at
        # the stop; what completes after it, in the drain, is measured but outside throughput).
        self.window_start = window_start
        self.window_end = math.inf

    def group(self, variant: str, mix: str) -> GroupStats:
        key = (variant, mix)
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = GroupStats()
        return g

    def bucket(self, variant: str, mix: str, bucket: str) -> BucketStats:
        key = (variant, mix, bucket)
        b = self.buckets.get(key)
        if b is None:
            b = self.buckets[key] = BucketStats()
        return b

    def turn(self, variant: str, mix: str, turn: int) -> BucketStats:
        key = (variant, mix, turn)
        t = self.turns.get(key)
        if t is None:
            t = self.turns[key] = BucketStats()
        return t

    def priority_class(self, variant: str, cls: str) -> GroupStats:
        key = (variant, cls)
        c = self.classes.get(key)
        if c is None:
            c = self.classes[key] = GroupStats()
        return c

    def start(self, variant: str, state: str) -> BucketStats:
        return self.starts.get((variant, state)) or self.starts.setdefault((variant, state), BucketStats())

    def add(self, rec: RequestRecord, wall_time: float) -> None:
        self.group(rec.variant, rec.mix).add(rec, self.window_start, self.window_end)
        if rec.priority_class:  # warm-up and cut-by-stop requests too: a group counts them as such
            self.priority_class(rec.variant, rec.priority_class).add(rec, self.window_start, self.window_end)
        self.variant_timeline.add(rec, wall_time, self.window_start)
        if rec.warmup or rec.cut_by_stop:
            return
        self.pairs.add(rec)
        self.start(rec.variant, rec.cold or "warm").add(rec)
        if rec.bucket:
            self.bucket(rec.variant, rec.mix, rec.bucket).add(rec)
        if rec.turn:
            self.turn(rec.variant, rec.mix, rec.turn).add(rec)
        sec = int(wall_time)
        row = self.timeline.get(sec)
        if row is None:
            row = self.timeline[sec] = [0, 0, 0]
        row[0] += 1
        if rec.error is None:
            row[1] += 1
            row[2] += rec.output_token_count

    def is_empty(self) -> bool:
        return (
            not self.groups
            and not self.buckets
            and not self.turns
            and not self.classes
            and not self.starts
            and not self.timeline
            and self.variant_timeline.is_empty()
            and self.pairs.is_empty()
        )

    def to_wire(self, histograms: bool = True) -> dict[str, Any]:
        return {
            "v": WIRE_VERSION,
            "groups": [[v, m, g.to_wire(histograms)] for (v, m), g in self.groups.items()],
            "buckets": [[v, m, b, bs.to_wire(histograms)] for (v, m, b), bs in self.buckets.items()],
            "turns": [[v, m, t, ts.to_wire(histograms)] for (v, m, t), ts in self.turns.items()],
            "classes": [[v, c, cs.to_wire(histograms)] for (v, c), cs in self.classes.items()],
            "starts": [[v, st, ss.to_wire(histograms)] for (v, st), ss in self.starts.items()],
            "timeline": [[s, *row] for s, row in self.timeline.items()],
            "variant_timeline": self.variant_timeline.to_wire(),
            "pairs": self.pairs.to_wire(),
        }

    def pop_delta(self, histograms: bool = True) -> dict[str, Any]:
        """What accumulated since the last delta. `histograms=False` ships the counters and timeline only and keeps
        the histograms accumulating for a later delta: merging histograms is most of the master's work per report,
        so with many workers each sends them every few intervals (see `Runtime.hist_every`)."""
        wire = self.to_wire(histograms)
        if histograms:
            self.groups = {}
            self.buckets = {}
            self.turns = {}
            self.classes = {}
            self.starts = {}
        else:
            for g in (*self.groups.values(), *self.classes.values()):
                g.reset_counters()
            for bs in (*self.buckets.values(), *self.turns.values(), *self.starts.values()):
                bs.reset_counters()
        self.timeline = {}
        self.variant_timeline = Timeline()
        self.pairs.clear_rows()  # every delta: few values per request, and the level must go on rising
        return wire

    def merge(self, other: Aggregate) -> None:
        for (v, m), g in other.groups.items():
            self.group(v, m).merge(g)
        for (v, m, b), bs in other.buckets.items():
            self.bucket(v, m, b).merge(bs)
        for (v, m, t), ts in other.turns.items():
            self.turn(v, m, t).merge(ts)
        for (v, c), cs in other.classes.items():
            self.priority_class(v, c).merge(cs)
        for (v, st), ss in other.starts.items():
            self.start(v, st).merge(ss)
        self._merge_timeline([[s, *row] for s, row in other.timeline.items()])
        self.variant_timeline.merge(other.variant_timeline)
        self.pairs.merge(other.pairs)

    def merge_wire(self, wire: dict[str, Any]) -> None:
        if wire.get("v") != WIRE_VERSION:
            raise ValueError(f"aggregate wire version {wire.get('v')!r}, expected {WIRE_VERSION}")
        for v, m, gw in wire.get("groups", []):
            self.group(v, m).merge_wire(gw)
        for v, m, b, bw in wire.get("buckets", []):
            self.bucket(v, m, b).merge_wire(bw)
        for v, m, t, tw in wire.get("turns", []):
            self.turn(v, m, int(t)).merge_wire(tw)
        for v, c, cw in wire.get("classes", []):
            self.priority_class(v, c).merge_wire(cw)
        for v, st, sw in wire.get("starts", []):
            self.start(v, st).merge_wire(sw)
        self._merge_timeline(wire.get("timeline", []))
        self.variant_timeline.merge_wire(wire.get("variant_timeline", {}))
        self.pairs.merge_wire(wire.get("pairs", {}))

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
