"""Sweep plans: which level a variant is loaded at next, given the steps it has run so far. A level is an open-loop
rate (req/s) in a rate sweep, or a closed-loop concurrency (users, whole numbers) in a concurrency sweep.

Pure (no clock, no I/O): the CLI runs each step and feeds its outcome back. Three plans:

- ``Ladder`` — fixed levels in increasing order (``--rates 2,4,8``, ``--linear START:STOP:STEP``,
  ``--geometric START:STOP:FACTOR``, and the same as ``--concurrency*``); it stops climbing after two failing steps
  in a row, or after an untrustworthy one (the load generator was the bottleneck, so higher levels measure it, not
  the server). In a rate sweep a saturated step stops it at once too (fewer than 90 % of the step's scheduled
  arrivals were sent: higher rates would only queue more in the load generator). In a concurrency sweep a saturated
  step (throughput stopped growing, see ``throughput_stalled``) is a failing step: more users only wait longer in
  the server's queue, which harms no measurement, and one short step's plateau may be noise the next one corrects;
- ``Search`` — bisection for the highest level meeting every SLO between MIN and MAX, as vLLM's ``serve_sla``
  search does: MIN, then MAX, then the midpoint of the knee (below) and the lowest failing level, until the two are
  within ``rel_tol`` of each other (or adjacent whole numbers, for concurrencies) or ``max_steps`` steps have run.

The knee is the last level before the first failure: the highest passing level below the lowest failing one (None
when none passed). A pass above a failure (2 ✓ 4 ✗ 8 ✓) is not the knee: the load between them already failed once,
and a capacity that holds only at some rates above it is no capacity to plan on.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "FAILS_IN_A_ROW",
    "SATURATION_SHARE",
    "STALL_GAIN",
    "STALL_SHARE",
    "Ladder",
    "Search",
    "StepOutcome",
    "SweepBy",
    "SweepPlan",
    "geometric_concurrencies",
    "geometric_rates",
    "knee",
    "linear_concurrencies",
    "linear_rates",
    "parse_plan",
    "saturated",
    "throughput_stalled",
]

SweepBy = Literal["rate", "concurrency"]

#: A step whose achieved rate is below this share of the requested one saturated the target (or the senders).
SATURATION_SHARE = 0.9
#: Closed loop: a step's requests/s must beat the step below it by this much (relative) ...
STALL_GAIN = 0.05
#: ... or by this share of the relative growth in users, whichever is smaller (see ``throughput_stalled``).
STALL_SHARE = 0.25
#: Failing steps in a row after which a ladder stops climbing.
FAILS_IN_A_ROW = 2
_MAX_LEVELS = 1000


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one step showed: its level (requested rate or concurrency), whether it met every SLO, and why it should
    not count as passing."""

    level: float
    slos_passed: bool
    saturated: bool = False
    untrustworthy: bool = False

    @property
    def passed(self) -> bool:
        return self.slos_passed and not self.saturated and not self.untrustworthy


def saturated(sent: int, scheduled: int) -> bool:
    """Open loop: True when fewer than ``SATURATION_SHARE`` of the arrivals the schedule put in the measured window
    were sent in it (the rest dropped, or still waiting for a sender at the stop).

    Counted against the step's own schedule, not rate × window: a Poisson schedule of R·T arrivals varies by
    sqrt(R·T) (20 % at 25 arrivals), which would flag short, healthy steps as saturated.
    """
    return scheduled <= 0 or sent < SATURATION_SHARE * scheduled


def throughput_stalled(
    users: int, requests_per_s: float, e2e_p50_ms: float | None, below: tuple[int, float, float | None] | None
) -> bool:
    """Closed loop: True when ``users`` bought (almost) no throughput over ``below``, the nearest lower concurrency
    measured, as ``(users, requests_per_s, e2e_p50_ms)``; an E2E p50 of None means it landed among failed requests.

    Closed loop has no schedule to fall behind: N users complete N / (latency + think time) requests/s, so while the
    server keeps up throughput grows with N, and once it saturates throughput stays flat and latency grows with N
    instead (Little's law). The step saturated when its requests/s grew by less than ``STALL_GAIN`` (5 %) over the
    step below *and* by less than ``STALL_SHARE`` (a quarter) of the users' relative growth, while its E2E p50 rose.
    The second bound keeps small steps honest: 32 -> 33 users (+3 %) can add at most 3 % throughput, which is no
    stall. The latency condition keeps noise out: a flat count of completions at a flat latency is not a queue.
    """
    if below is None:
        return False
    users_below, rps_below, e2e_below = below
    if users <= users_below or rps_below <= 0:
        return False
    gain = requests_per_s / rps_below - 1
    if gain >= min(STALL_GAIN, STALL_SHARE * (users / users_below - 1)):
        return False
    if e2e_p50_ms is None:
        return True  # the median request failed: certainly no better than the step below
    return e2e_below is not None and e2e_p50_ms > e2e_below


def knee(history: Sequence[StepOutcome]) -> float | None:
    """The highest passing level below the lowest level that did not pass (saturated and untrustworthy steps do
    not), in level order whatever order the steps ran in; None when none passed below it."""
    first_fail = min((h.level for h in history if not h.passed), default=math.inf)
    passing = [h.level for h in history if h.passed and h.level < first_fail]
    return max(passing) if passing else None


@dataclass(frozen=True, slots=True)
class Ladder:
    """Fixed, strictly increasing levels, climbed until two fails in a row or an untrustworthy step (or, with
    ``saturation_stops``, a saturated one: rate sweeps)."""

    levels: tuple[float, ...]
    saturation_stops: bool = True

    def __post_init__(self) -> None:
        if not self.levels:
            raise ValueError("no levels")
        if any(not math.isfinite(r) or r <= 0 for r in self.levels):
            raise ValueError(f"levels must be positive numbers, got {list(self.levels)}")
        if any(b <= a for a, b in zip(self.levels, self.levels[1:], strict=False)):
            raise ValueError(f"levels must increase strictly, got {list(self.levels)}")
        if len(self.levels) > _MAX_LEVELS:
            raise ValueError(f"{len(self.levels)} levels; at most {_MAX_LEVELS}")

    def next_level(self, history: Sequence[StepOutcome]) -> float | None:
        if history:
            last = history[-1]
            if last.untrustworthy or (last.saturated and self.saturation_stops):
                return None
            tail = history[-FAILS_IN_A_ROW:]
            if len(tail) == FAILS_IN_A_ROW and not any(h.passed for h in tail):
                return None
        return self.levels[len(history)] if len(history) < len(self.levels) else None

    @property
    def highest(self) -> float:
        return self.levels[-1]


@dataclass(frozen=True, slots=True)
class Search:
    """Bisection for the knee in [lo, hi] (the last passing level before the first failure); over whole numbers
    with ``integer``."""

    lo: float
    hi: float
    max_steps: int = 8
    rel_tol: float = 0.05
    integer: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)) or self.lo <= 0 or self.hi <= self.lo:
            raise ValueError(f"expected 0 < MIN < MAX, got {self.lo:g}:{self.hi:g}")
        if self.integer and (self.lo != int(self.lo) or self.hi != int(self.hi)):
            raise ValueError(f"expected whole numbers MIN:MAX, got {self.lo:g}:{self.hi:g}")
        if self.max_steps < 2:
            raise ValueError("a search needs at least 2 steps (MIN and MAX)")

    def next_level(self, history: Sequence[StepOutcome]) -> float | None:
        if not history:
            return self.lo
        if len(history) >= self.max_steps or history[-1].untrustworthy:
            return None
        first = history[0]
        if not first.passed:
            return None  # even MIN fails: no knee in the range
        if len(history) == 1:
            return self.hi
        # Bisect between the knee and the lowest failing level above it, as `knee` reads the steps.
        best = knee(history)
        fails = [h.level for h in history if not h.passed]
        if not fails:
            return None  # MAX passed
        if best is None:
            return None  # not reached: MIN passed, and it is the lowest level
        worst = min(fails)
        if worst - best <= self.rel_tol * best:
            return None
        if self.integer:
            # Adjacent whole numbers leave nothing between them: the knee is exact.
            return None if worst - best <= 1 else float((int(best) + int(worst)) // 2)
        return round((best + worst) / 2, 4)

    @property
    def highest(self) -> float:
        return self.hi


SweepPlan = Ladder | Search


def linear_rates(start: float, stop: float, step: float) -> tuple[float, ...]:
    """start, start + step, … up to stop (included when it lands on it, within rounding)."""
    if not all(math.isfinite(x) for x in (start, stop, step)) or start <= 0 or step <= 0 or stop < start:
        raise ValueError(f"expected 0 < START <= STOP and STEP > 0, got {start:g}:{stop:g}:{step:g}")
    n = math.floor((stop - start) / step + 1e-9) + 1
    if n > _MAX_LEVELS:
        raise ValueError(f"{n} levels; at most {_MAX_LEVELS}")
    return tuple(round(start + i * step, 6) for i in range(n))


def geometric_rates(start: float, stop: float, factor: float) -> tuple[float, ...]:
    """start, start·factor, … up to stop (included when it lands on it, within rounding)."""
    if not all(math.isfinite(x) for x in (start, stop, factor)) or start <= 0 or factor <= 1 or stop < start:
        raise ValueError(f"expected 0 < START <= STOP and FACTOR > 1, got {start:g}:{stop:g}:{factor:g}")
    n = math.floor(math.log(stop / start) / math.log(factor) + 1e-9) + 1
    if n > _MAX_LEVELS:
        raise ValueError(f"{n} levels; at most {_MAX_LEVELS}")
    return tuple(round(start * factor**i, 6) for i in range(n))


def _whole(values: Sequence[float], form: str, text: str) -> list[int]:
    if any(v != int(v) or v < 1 for v in values):
        raise ValueError(f"expected {form} as whole numbers >= 1 (users), got {text!r}")
    return [int(v) for v in values]


def linear_concurrencies(start: int, stop: int, step: int) -> tuple[int, ...]:
    """start, start + step, … up to stop (included when it lands on it): whole numbers of users."""
    return tuple(int(x) for x in linear_rates(start, stop, step))


def geometric_concurrencies(start: int, stop: int, factor: float) -> tuple[int, ...]:
    """start, start·factor, … up to stop, each rounded to the nearest whole number of users; a level that rounds
    onto the one before it is left out (1:10:1.5 gives 1, 2, 3, 5, 8)."""
    out: list[int] = []
    for x in geometric_rates(start, stop, factor):
        n = round(x)
        if not out or n > out[-1]:
            out.append(n)
    return tuple(out)


def _numbers(text: str, count: int, form: str) -> list[float]:
    parts = text.split(":")
    if len(parts) != count:
        raise ValueError(f"expected {form}, got {text!r}")
    try:
        return [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"expected {form} (numbers), got {text!r}") from None


def parse_plan(kind: str, text: str, *, by: SweepBy = "rate", max_steps: int = 8) -> SweepPlan:
    """A plan from one CLI flag's value; ``kind`` is list (or rates), linear, geometric or search; ``by`` says
    whether the levels are rates (req/s) or concurrencies (whole numbers of users). Raises ValueError."""
    unit = "req/s" if by == "rate" else "users"
    if kind in ("list", "rates"):
        try:
            levels = [float(p) for p in text.split(",") if p.strip()]
        except ValueError:
            raise ValueError(f"expected comma-separated levels ({unit}), e.g. 2,4,8, got {text!r}") from None
        if by == "concurrency":
            return Ladder(tuple(_whole(levels, "comma-separated levels", text)), saturation_stops=False)
        return Ladder(tuple(levels))
    if kind in ("linear", "geometric"):
        form = "START:STOP:STEP" if kind == "linear" else "START:STOP:FACTOR"
        start, stop, third = _numbers(text, 3, form)
        if by == "rate":
            make = linear_rates if kind == "linear" else geometric_rates
            return Ladder(make(start, stop, third))
        ends = _whole([start, stop] + ([third] if kind == "linear" else []), form, text)
        if kind == "linear":
            return Ladder(linear_concurrencies(*ends), saturation_stops=False)
        return Ladder(geometric_concurrencies(ends[0], ends[1], third), saturation_stops=False)
    if kind == "search":
        lo, hi = _numbers(text, 2, "MIN:MAX")
        if by == "concurrency":
            lo, hi = _whole([lo, hi], "MIN:MAX", text)
        return Search(lo, hi, max_steps=max_steps, integer=by == "concurrency")
    raise ValueError(f"unknown sweep kind {kind!r}")
