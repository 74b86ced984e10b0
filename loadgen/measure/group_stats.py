"""One (variant, mix) — or (variant, priority class), (variant, adapter) — over the measured window: its latency
histograms and counters, how a request adds to them, and their wire form. Apart from aggregate.py (which keys them
and ships them) so that neither passes 500 lines."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from loadgen.measure.fates import (
    CENSORED_METRICS,
    FATES,
    NOT_SENT,
    RECORDED_METRICS,
    Fate,
    FateRow,
    LatencyPlan,
    Use,
    fate_of,
    latencies,
)
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.reasoning import add_reasoning
from loadgen.measure.recording import record_values
from loadgen.measure.records import RequestRecord
from loadgen.measure.slices import tokens_in_window
from loadgen.measure.wire_fields import COUNTER, COUNTS, add_counts, merge_rows, merge_stats

__all__ = ["CENSORED_METRICS", "CONNECTION_METRICS", "NOT_SENT", "GroupStats", "group_at", "merge_group_rows"]

# Opening a connection: beside TTFT, not in it (TTFT runs from the request write).
CONNECTION_METRICS: tuple[str, ...] = ("connect", "tls")
# What a record of the window adds one value to (when it has one), in this order: how long opening its connection
# took, how late it went out (open loop), then its latencies as its fate's row says (`fates.latencies`).
_RECORDED = (*CONNECTION_METRICS, "queue_delay", *RECORDED_METRICS)
# Metrics where a request that never got there is a censored sample (above everything measured).
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
    "cancelled",
    "drained",
    "completed_ok",
    "drained_good",
    "ok_without_tokens",
    "goodput_judged",
    "goodput_ok",
    "good_output_tokens",
)
_COUNTS = ("fates", "errors", "token_sources", "censored", "finish_reasons", "arrivals", "goodput_misses", "reasoning")
# What each key of a group's wire form is, for the merge that walks the keys a delta has.
_WIRE_KIND = {**dict.fromkeys(_COUNTERS, COUNTER), **dict.fromkeys(_COUNTS, COUNTS)}


@dataclass(slots=True)
class GroupStats:
    """One (variant, mix) over the measured window.

    A request adds to it as its fate's row says (measure/fates.py): it belongs to the window it was sent in
    (`requests`, `ok`, `errors`, latency samples, measured or censored); throughput counts what completed inside the
    window, whichever window it was sent in — the tokens whose chunks arrived in it (a request sent during the
    warm-up adds the tokens it streamed after it, one still running at the stop the tokens it streamed before) and
    the successes that ended in it (`completed_ok`).
    """

    hists: dict[str, LatencyHistogram] = field(default_factory=dict)
    # Every request by its fate (measure/fates.py), each counted once: the counters below are views of these.
    fates: dict[str, int] = field(default_factory=dict)
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
    # Given up by the client (`traffic.cancel`): neither a success nor an error, censored in E2E and TPOT; a TTFT
    # it had counts.
    cancelled: int = 0
    # Completed during the drain (after the window's end): in the latencies and the success rate, not in
    # requests/s (throughput is over the window).
    drained: int = 0
    drained_good: int = 0  # of the drained, those that met every per-request SLO (goodput/s is over the window too)
    # Successes that completed inside the window, whichever window they were sent in: requests/s, as token
    # throughput counts the tokens that arrived in it (counting by send would lose the requests in flight at both
    # of its edges, ~concurrency / window too few per second).
    completed_ok: int = 0
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
    # The output tokens (inside the window, as `output_tokens` counts them) of the requests that met every bound:
    # what the cost per good token is over.
    good_output_tokens: int = 0
    reasoning: dict[str, int] = field(default_factory=dict)  # a reasoning model's phases (measure/reasoning.py)

    def _hist(self, metric: str) -> LatencyHistogram:
        h = self.hists.get(metric)
        if h is None:
            h = self.hists[metric] = LatencyHistogram()
        return h

    def _censor(self, metric: str) -> None:
        self.censored[metric] = self.censored.get(metric, 0) + 1

    def add(
        self,
        rec: RequestRecord,
        window_start: float = -math.inf,
        window_end: float = math.inf,
        fate: Fate | None = None,
        lat: tuple[LatencyPlan, tuple[float | None, ...]] | None = None,
    ) -> None:
        """One record, as its fate's row says (measure/fates.py). `fate` (`fate_of(rec, window_end)`) and `lat`
        (`fates.latencies` of its row): when the caller has them already (`Aggregate.add`: one request adds to its
        group, its class and its adapter)."""
        if fate is None:
            fate = fate_of(rec, window_end)
        row = FATES[fate]
        self.fates[fate.value] = self.fates.get(fate.value, 0) + 1
        done = rec.done
        if rec.error is None and not rec.cut_by_stop and not rec.cancelled and done is not None:
            self.completed_ok += window_start <= done <= window_end
        tokens = tokens_in_window(rec, window_start, window_end)
        if not row.in_window:
            self.warmup_excluded += 1
            self.output_tokens += tokens
            return
        self.target_prompt_tokens += rec.prompt_tokens_target
        self.shared_prefix_tokens += rec.shared_prefix_tokens
        self._latencies(rec, row, lat)
        if row.outcome == "neither":  # ended by the client or the stop: in no success rate
            if fate is Fate.CUT_AT_STOP:
                self.cut_by_stop += 1
                if rec.done is not None:
                    start = rec.scheduled if rec.scheduled is not None else rec.sent
                    self._hist("cut_age").record(rec.done - start)
            else:
                self.cancelled += 1
            self.output_tokens += tokens
            self._goodput(rec, tokens, window_end)
            return
        self.requests += 1
        if rec.done is not None and rec.done > window_end:
            self.drained += 1
        if row.outcome == "failure":
            assert rec.error is not None
            self.errors[rec.error] = self.errors.get(rec.error, 0) + 1
            self.output_tokens += tokens
            return
        self.ok += 1
        # The server's usage may count a token that never came as a chunk (EOS with an empty delta). A whole reply's
        # tokens are all its usage's, counted by `tokens_in_window`.
        usage_extra = rec.output_token_count - rec.tokens_received if rec.streamed else 0
        tokens += max(usage_extra, 0)
        self.output_tokens += tokens
        self._goodput(rec, tokens, window_end)
        if rec.prompt_tokens is not None:
            self.prompt_tokens += rec.prompt_tokens
            if rec.cached_prompt_tokens is not None:
                self.cache_reported += 1
                self.cache_prompt_tokens += rec.prompt_tokens
                self.cached_prompt_tokens += rec.cached_prompt_tokens
        self.token_sources[rec.token_source] = self.token_sources.get(rec.token_source, 0) + 1
        reason = rec.finish_reason or "unknown"
        self.finish_reasons[reason] = self.finish_reasons.get(reason, 0) + 1
        if not (rec.chunk_times if rec.streamed else rec.output_token_count):
            self.ok_without_tokens += 1  # a whole reply: when its usage counted no output token
        add_reasoning(self.reasoning, self._hist, rec)

    def _latencies(
        self, rec: RequestRecord, row: FateRow, lat: tuple[LatencyPlan, tuple[float | None, ...]] | None = None
    ) -> None:
        """A record of the window into the histograms, in one call (measure/recording.py): its connection's
        opening, its queue delay, every latency measured or censored as its fate's row says, and the gaps it did
        stream (real gaps, whatever became of it)."""
        plan, values = lat or latencies(rec, row)
        for metric in plan.censored:
            self._censor(metric)
        times = rec.chunk_times if row.itl is Use.MEASURED else None
        record_values(
            self.hists,
            self._hist,
            _RECORDED,
            (rec.connect_s, rec.tls_s, rec.queue_delay, *values),
            times,
            rec.chunk_tokens,
        )

    def _goodput(self, rec: RequestRecord, tokens: int, window_end: float) -> None:
        """A judged request (`goodput_misses`, set by the recorder): good, or the bounds it missed."""
        misses = rec.goodput_misses
        if misses is None:
            return
        self.goodput_judged += 1
        if misses:
            add_counts(self.goodput_misses, dict.fromkeys(misses, 1))
            return
        self.goodput_ok += 1
        self.good_output_tokens += tokens
        if rec.done is not None and rec.done > window_end:
            self.drained_good += 1

    def add_not_sent(self, in_warmup: bool = False) -> None:
        """An open-loop arrival that was never sent (dropped: every sender was busy; or still waiting for one at the
        stop). Of the window (`NOT_SENT`): a failed request of its own class, `not_sent`, in the success rate, and a
        censored sample of every latency its row censors. Due in the warm-up: counted there, nothing more."""
        fate = Fate.IN_WARMUP if in_warmup else Fate.NOT_SENT
        self.fates[fate.value] = self.fates.get(fate.value, 0) + 1
        if in_warmup:
            self.warmup_excluded += 1
            return
        self.requests += 1
        self.errors[NOT_SENT] = self.errors.get(NOT_SENT, 0) + 1
        row = FATES[fate]
        for metric in RECORDED_METRICS:
            if row.use(metric) is Use.CENSORED:
                self._censor(metric)

    @property
    def window_requests(self) -> int:
        """The window's requests whatever became of them: those that ended (`requests`), and those the client or the
        stop ended (goodput's share is over these: a request cut or given up was not good)."""
        return self.requests + self.cut_by_stop + self.cancelled

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
            blob = h.wire()
            first = by_blob.setdefault(blob, m)
            if first == m:
                hists[m] = blob
            else:
                alias[m] = first
        # Most counters of a delta are zero and most counts empty (drained, cancelled, cache, arrivals…): they stay
        # off the wire, which a master merging every worker's every group walks key by key.
        out: dict[str, Any] = {"hists": hists}
        if alias:
            out["alias"] = alias
        for name in _COUNTERS:
            v = getattr(self, name)
            if v:
                out[name] = v
        for name in _COUNTS:
            counts = getattr(self, name)
            if counts:
                out[name] = dict(counts)
        return out

    def merge_wire(self, w: dict[str, Any]) -> None:
        # A blob several metrics share (`to_wire`'s alias) is decoded once and added to each.
        merge_stats(self, w, _WIRE_KIND, self._hist, alias=True)


def group_at(groups: dict[Any, GroupStats], key: tuple[str, str]) -> GroupStats:
    """The group at `key` (variant and mix, class or adapter) of a map of groups (an empty one on first use)."""
    g = groups.get(key)
    if g is None:
        g = groups[key] = GroupStats()
    return g


def merge_group_rows(into: dict[Any, GroupStats], rows: Any) -> None:
    """Wire rows `[variant, name, wire]` (an aggregate's groups, classes or adapters) merged into `into`'s group at
    (variant, name): in one C call where built (`wire_fields.merge_rows`)."""

    def one(row: Any) -> None:
        v, name, w = row
        group_at(into, (v, name)).merge_wire(w)

    merge_rows(into, rows, 2, GroupStats, _WIRE_KIND, True, one)
