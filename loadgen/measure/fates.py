"""How a request ended, and what that makes it count for: the one table every figure reads.

Every request the scenario asked for has exactly one fate (`fate_of`; an open-loop arrival that was never sent is
`NOT_SENT` or `IN_WARMUP` without a record). For each fate the table (`FATES`) says how it enters each latency
(`Use`: measured, censored, measured when it got that far and censored otherwise, or left out), the success rate,
goodput, the paired comparison, the slices and samples, early stop and throughput. `GroupStats`, `BucketStats`,
`PairSamples`, `Timeline`, the goodput judge and the stop counts ask `latency` / the row instead of deciding for
themselves, and `docs/metrics.md`'s fate table is generated from it (scripts/gen-docs.py).

Censored means "above every measured value" (`LatencyHistogram.summary_ms`): a percentile that falls among censored
samples is not known, and reported as censored. That is what keeps the invariant the property tests hold: no fate
can make a variant look better — a request made slower, or ended earlier by any cut, cancel or timeout, never
improves its variant's percentiles, goodput, speedup or agreement. Censoring at the age a request reached would not
keep it (a request cut at 2 s that would have taken 5 s would lower the p99), so the age is kept apart (`cut_age`);
nor would TPOT over the tokens that came (a reply cut before its slow part would lower it), so a reply that did not
end is a censored TPOT. ITL is per gap: the gaps that were streamed are measured, the ones that never came are not
samples of anything (the invariant is not claimed for ITL).

A request belongs to the window it was sent in (open loop: scheduled in), never the one it ended in: one sent during
the warm-up carries the ramp's queueing in its TTFT (vllm-project/guidellm#1078 fixed the same leak). Tokens count
for throughput by when they arrived, whichever request carried them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum

from loadgen.measure.records import ErrorKind, RequestRecord

__all__ = [
    "CENSORED_METRICS",
    "FATES",
    "LATENCY_METRICS",
    "NOT_SENT",
    "RECORDED_METRICS",
    "Fate",
    "FateRow",
    "Use",
    "fate_name",
    "LatencyPlan",
    "fate_of",
    "latencies",
    "latency",
    "sent_in_warmup",
]

# The error class of an open-loop arrival that was never sent (`GroupStats.add_not_sent`).
NOT_SENT = "not_sent"


class Fate(StrEnum):
    SUCCEEDED = "succeeded"
    DRAINED = "drained"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    CUT_AT_STOP = "cut_at_stop"
    CANCELLED_BY_TIME = "cancelled_by_time"
    CANCELLED_BY_TOKENS = "cancelled_by_tokens"
    NOT_SENT = "not_sent"
    IN_WARMUP = "in_warmup"


class Use(StrEnum):
    """How a fate enters one latency."""

    MEASURED = "measured"
    # TTFT and its kin: measured when the first token came, else censored (it did not come fast).
    IF_REACHED = "measured if reached, else censored"
    CENSORED = "censored"
    NONE = "left out"


# The latencies a fate decides: the `_from_schedule` ones follow their base metric (open loop only).
LATENCY_METRICS: tuple[str, ...] = ("ttft", "itl", "tpot", "e2e")


@dataclass(frozen=True, slots=True)
class FateRow:
    fate: Fate
    meaning: str
    ttft: Use
    itl: Use
    tpot: Use
    e2e: Use
    # The success rate: "success", "failure" or "neither" (ended by the client or the stop, not by the target).
    outcome: str
    # In the window's request count (the denominators of goodput's share and of the pairs).
    in_window: bool
    # Goodput: "judged" (every bound on its values; a censored value misses its bound), "not good", or "none".
    goodput: str
    # The paired comparison: its values (censored as above) under its request's key, or left out.
    pairs: bool
    # The slices kept per length bucket, session turn, images carried and cold/warm start (TTFT and E2E, same use).
    slices: bool
    # The latency fit and the quality samples: a reply that ended as the target meant it to.
    complete: bool
    # stop_when's counts: "success", "failure" or "none".
    early_stop: str
    why: str
    # What a step of this fate makes its agent session (measure/sessions.py): "goes on", "fails it" (the session
    # failed: its duration censored), "cuts it" (ended by the stop or the client: censored), "leaves it out" (the
    # session opened before the window).
    session: str = "goes on"

    @property
    def in_timeline(self) -> bool:
        """The per-second timeline of completions: requests of the window that the target ended."""
        return self.in_window and self.outcome != "neither"

    def use(self, metric: str) -> Use:
        """The use of `metric` (a `_from_schedule` metric follows its base)."""
        return getattr(self, metric.removesuffix("_from_schedule"))


def _ended(fate: Fate, meaning: str, outcome: str, why: str) -> FateRow:
    """A request of the window the target ended: a success is measured whole and judged for goodput; a failure is
    measured as far as it got (its gaps, a first token it had) and censored beyond, never good."""
    ok = outcome == "success"
    return FateRow(
        fate,
        meaning,
        ttft=Use.MEASURED if ok else Use.IF_REACHED,
        itl=Use.MEASURED,
        tpot=Use.MEASURED if ok else Use.CENSORED,
        e2e=Use.MEASURED if ok else Use.CENSORED,
        outcome=outcome,
        in_window=True,
        goodput="judged" if ok else "not good",
        pairs=True,
        slices=True,
        complete=ok,
        early_stop=outcome,
        why=why,
        session="goes on" if ok else "fails it",
    )


def _unfinished(fate: Fate, meaning: str, why: str) -> FateRow:
    """A request the stop or the client ended before the target did: what it reached is measured, its end censored."""
    return FateRow(
        fate,
        meaning,
        ttft=Use.IF_REACHED,
        itl=Use.MEASURED,
        tpot=Use.CENSORED,
        e2e=Use.CENSORED,
        outcome="neither",
        in_window=True,
        goodput="judged",
        pairs=True,
        slices=True,
        complete=False,
        early_stop="none",
        why=why,
        session="cuts it",
    )


FATES: dict[Fate, FateRow] = {
    row.fate: row
    for row in (
        _ended(
            Fate.SUCCEEDED,
            "ended as the target meant it to, inside the window",
            "success",
            "the reference case",
        ),
        _ended(
            Fate.DRAINED,
            "sent in the window (or a later step of an agent task the window opened), succeeded after its end (in "
            "the drain)",
            "success",
            "it belongs to the window it was sent in; rates are over the window's length, so not in them",
        ),
        _ended(
            Fate.FAILED,
            "an error from the target or the connection (by class: connect, http_5xx, stream_interrupted …)",
            "failure",
            "a failure cannot pass a latency SLO: left out, the requests that stalled and died would leave the tail",
        ),
        _ended(
            Fate.TIMED_OUT,
            "no end within `timeout` (error class `timeout`)",
            "failure",
            "the slowest requests of all: censored, never dropped",
        ),
        _unfinished(
            Fate.CUT_AT_STOP,
            "still running when the drain ended",
            "it had run the drain at least and not ended; its age is kept (`cut_by_stop_age_ms`)",
        ),
        _unfinished(
            Fate.CANCELLED_BY_TIME,
            "given up by the client after a drawn time (`traffic.cancel.after`)",
            "only a request still running at its cancel time is cancelled: dropped, the slow ones would leave "
            "exactly the tail",
        ),
        _unfinished(
            Fate.CANCELLED_BY_TOKENS,
            "given up by the client after a drawn count of tokens (`traffic.cancel.after_tokens`)",
            "its end is unknown; the same requests are cut at the same count in every variant, so pairs stay "
            "paired, censored on both sides",
        ),
        FateRow(
            Fate.NOT_SENT,
            "open loop: an arrival of the window dropped, or still unsent at the stop (error class `not_sent`)",
            ttft=Use.CENSORED,
            itl=Use.NONE,
            tpot=Use.CENSORED,
            e2e=Use.CENSORED,
            outcome="failure",
            in_window=True,
            goodput="not good",
            pairs=False,
            slices=False,
            complete=False,
            early_stop="failure",
            why="what the client could not send is part of the verdict; it has no record, so no key to pair",
            session="fails it",
        ),
        FateRow(
            Fate.IN_WARMUP,
            "sent (open loop: scheduled) before the warm-up ended, whenever it ended",
            ttft=Use.NONE,
            itl=Use.NONE,
            tpot=Use.NONE,
            e2e=Use.NONE,
            outcome="neither",
            in_window=False,
            goodput="none",
            pairs=False,
            slices=False,
            complete=False,
            early_stop="as it ended",
            why="the window is the requests sent in it: the ramp's queueing stays out of TTFT; its tokens that "
            "arrived inside the window still count for throughput",
            session="leaves it out",
        ),
    )
}


# The latencies a record adds one sample to, measured or censored (ITL and ICL: one per gap, `record_chunk_gaps`).
RECORDED_METRICS: tuple[str, ...] = ("ttft", "ttft_from_schedule", "e2e", "e2e_from_schedule", "tpot")
# Those some fate censors: a censored sample lies above everything measured (`LatencyHistogram.summary_ms`).
CENSORED_METRICS: tuple[str, ...] = tuple(
    m for m in RECORDED_METRICS if any(row.use(m) in (Use.CENSORED, Use.IF_REACHED) for row in FATES.values())
)


def sent_in_warmup(rec: RequestRecord, warmup_end: float) -> bool:
    """Window membership by send time (open loop: by schedule, so a late send of a ramp arrival stays out)."""
    at = rec.scheduled if rec.scheduled is not None else rec.sent
    return at < warmup_end


# `fate_of` of a record the recorder stamped: the member by its value, without Enum's call.
_FATE_BY_VALUE: dict[str, Fate] = {f.value: f for f in Fate}


def fate_of(rec: RequestRecord, window_end: float = math.inf) -> Fate:
    """The one fate of a finished record (`rec.warmup` set by `sent_in_warmup`): the one the recorder stamped when
    it did (it knew the window's end; a rebuild from raw rows does not), else from the record's own fields."""
    if rec.fate:
        stamped = _FATE_BY_VALUE.get(rec.fate)
        return stamped if stamped is not None else Fate(rec.fate)
    if rec.warmup:
        return Fate.IN_WARMUP
    if rec.cut_by_stop:
        return Fate.CUT_AT_STOP
    if rec.cancelled:
        return Fate.CANCELLED_BY_TIME if rec.cancelled == "time" else Fate.CANCELLED_BY_TOKENS
    if rec.error == ErrorKind.TIMEOUT:
        return Fate.TIMED_OUT
    if rec.error is not None:
        return Fate.NOT_SENT if rec.error == NOT_SENT else Fate.FAILED
    if rec.done is not None and rec.done > window_end:
        return Fate.DRAINED
    return Fate.SUCCEEDED


def fate_name(rec: RequestRecord) -> str:
    """The fate exports name (`fate_of`'s, by its value)."""
    return fate_of(rec).value


# What `_decide` makes of a latency: the record's value, a censored sample, or nothing.
_VALUE, _CENSORED, _NOTHING = "value", "censored", "nothing"


def _decide(metric: str, use: Use, streamed: bool, scheduled: bool, reached: bool, done: bool) -> str:
    """How a record enters `metric` (see `latency`), from its fate's use of it and the record's shape: `streamed`,
    `scheduled` (open loop), `reached` (it had a first token) and `done` (it has an end time)."""
    if use is Use.NONE:
        return _NOTHING
    from_schedule = metric.endswith("_from_schedule")
    if from_schedule and not scheduled:
        return _NOTHING
    base = metric.removesuffix("_from_schedule")
    if base == "e2e":
        if use is Use.CENSORED:
            return _CENSORED
        return _VALUE if done else _NOTHING
    if not streamed:
        return _NOTHING
    if base == "ttft":
        if not reached:
            return _CENSORED if use is not Use.MEASURED else _NOTHING
        return _VALUE
    if base == "tpot":
        return _CENSORED if use is Use.CENSORED else _VALUE
    raise ValueError(f"latency: {metric!r} is not one of ttft, tpot, e2e (or their _from_schedule)")


def _value(rec: RequestRecord, metric: str) -> float | None:
    """The record's value of `metric` (seconds), where `_decide` says it has one (TPOT may still be None)."""
    from_schedule = metric.endswith("_from_schedule")
    base = metric.removesuffix("_from_schedule")
    if base == "tpot":
        return rec.tpot
    start = rec.scheduled if from_schedule else rec.sent
    end = rec.done if base == "e2e" else rec.chunk_times[0]
    return end - start  # type: ignore[operator]


def latency(rec: RequestRecord, metric: str, row: FateRow) -> tuple[float | None, bool]:
    """(value in seconds, censored) of `metric` for a record of fate `row`: (None, False) when it has none.

    `metric` is one of `LATENCY_METRICS` but ITL (a request gives ITL many samples: `record_chunk_gaps`), or
    `ttft_from_schedule` / `e2e_from_schedule`. A whole reply (`streamed` False) has no TTFT or TPOT, neither
    measured nor censored. A `_from_schedule` metric exists in open loop only. (`latencies` gives the same for every
    metric of `RECORDED_METRICS` at once.)"""
    how = _decide(
        metric, row.use(metric), rec.streamed, rec.scheduled is not None, bool(rec.chunk_times), rec.done is not None
    )
    if how is _VALUE:
        return _value(rec, metric), False
    return None, how is _CENSORED


@dataclass(frozen=True, slots=True)
class LatencyPlan:
    """What `latency` gives each metric of `RECORDED_METRICS` for every record of one fate and shape (streamed,
    scheduled, reached a first token, has an end): which carry the record's value (`measured`, one flag per metric)
    and which are censored samples (`censored`, by name). Built once per fate and shape (`latencies`), so a request
    does not ask the table metric by metric."""

    row: FateRow
    measured: tuple[bool, ...]
    censored: tuple[str, ...]


_PLANS: dict[tuple[int, bool, bool, bool, bool], LatencyPlan] = {}
# `latencies` reads the values in this order, without a lookup by name.
assert RECORDED_METRICS == ("ttft", "ttft_from_schedule", "e2e", "e2e_from_schedule", "tpot")


def _plan(row: FateRow, streamed: bool, scheduled: bool, reached: bool, done: bool) -> LatencyPlan:
    hows = [_decide(m, row.use(m), streamed, scheduled, reached, done) for m in RECORDED_METRICS]
    return LatencyPlan(
        row,
        tuple(how is _VALUE for how in hows),
        tuple(m for m, how in zip(RECORDED_METRICS, hows, strict=True) if how is _CENSORED),
    )


def latencies(rec: RequestRecord, row: FateRow) -> tuple[LatencyPlan, tuple[float | None, ...]]:
    """`latency` of every metric of `RECORDED_METRICS` at once: the plan of the record's fate and shape (its censored
    metrics), and the values in `RECORDED_METRICS` order (None where the record has none). Equal to `latency` metric
    by metric (tests/unit/test_record_values.py); what a finished request is recorded by, once for all its groups."""
    sched = rec.scheduled
    times = rec.chunk_times
    done = rec.done
    streamed = rec.streamed
    key = (id(row), streamed, sched is not None, bool(times), done is not None)
    plan = _PLANS.get(key)
    if plan is None or plan.row is not row:
        plan = _PLANS[key] = _plan(row, *key[1:])
    ttft, ttft_s, e2e, e2e_s, tpot = plan.measured
    sent = rec.sent
    first = times[0] if ttft or ttft_s else 0.0
    return plan, (
        first - sent if ttft else None,
        first - sched if ttft_s else None,  # type: ignore[operator]
        done - sent if e2e else None,  # type: ignore[operator]
        done - sched if e2e_s else None,  # type: ignore[operator]
        rec.tpot if tpot else None,
    )
