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
    "fate_of",
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


def fate_of(rec: RequestRecord, window_end: float = math.inf) -> Fate:
    """The one fate of a finished record (`rec.warmup` set by `sent_in_warmup`): the one the recorder stamped when
    it did (it knew the window's end; a rebuild from raw rows does not), else from the record's own fields."""
    if rec.fate:
        return Fate(rec.fate)
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


def latency(rec: RequestRecord, metric: str, row: FateRow) -> tuple[float | None, bool]:
    """(value in seconds, censored) of `metric` for a record of fate `row`: (None, False) when it has none.

    `metric` is one of `LATENCY_METRICS` but ITL (a request gives ITL many samples: `record_chunk_gaps`), or
    `ttft_from_schedule` / `e2e_from_schedule`. A whole reply (`streamed` False) has no TTFT or TPOT, neither
    measured nor censored. A `_from_schedule` metric exists in open loop only."""
    use = row.use(metric)
    if use is Use.NONE:
        return None, False
    from_schedule = metric.endswith("_from_schedule")
    if from_schedule and rec.scheduled is None:
        return None, False
    base = metric.removesuffix("_from_schedule")
    if base == "e2e":
        if use is Use.CENSORED:
            return None, True
        if rec.done is None:
            return None, False
        return rec.done - (rec.scheduled if from_schedule else rec.sent), False  # type: ignore[operator]
    if not rec.streamed:
        return None, False
    if base == "ttft":
        if not rec.chunk_times:
            return None, use is not Use.MEASURED
        return rec.chunk_times[0] - (rec.scheduled if from_schedule else rec.sent), False  # type: ignore[operator]
    if base == "tpot":
        return (None, True) if use is Use.CENSORED else (rec.tpot, False)
    raise ValueError(f"latency: {metric!r} is not one of ttft, tpot, e2e (or their _from_schedule)")
