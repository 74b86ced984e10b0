"""Sweep plans: which open-loop rate a variant is loaded at next, given the steps it has run so far.

Pure (no clock, no I/O): the CLI runs each step and feeds its outcome back. Three plans:

- ``Ladder`` — fixed rates in increasing order (``--rates 2,4,8``, ``--linear START:STOP:STEP``,
  ``--geometric START:STOP:FACTOR``); it stops climbing after two failing steps in a row, or at once when a step
  saturates (fewer than 90 % of the step's scheduled arrivals were sent: higher rates would only queue more) or was
  untrustworthy (the load generator was the bottleneck, so higher rates measure it, not the server);
- ``Search`` — bisection for the highest rate meeting every SLO between MIN and MAX, as vLLM's ``serve_sla`` search
  does: MIN, then MAX, then the midpoint of the highest passing and lowest failing rate, until the two are within
  ``rel_tol`` of each other or ``max_steps`` steps have run.

The knee is the highest rate of a passing step (None when none passed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "SATURATION_SHARE",
    "Ladder",
    "Search",
    "StepOutcome",
    "SweepPlan",
    "geometric_rates",
    "knee",
    "linear_rates",
    "parse_plan",
]

#: A step whose achieved rate is below this share of the requested one saturated the target (or the senders).
SATURATION_SHARE = 0.9
#: Failing steps in a row after which a ladder stops climbing.
FAILS_IN_A_ROW = 2
_MAX_RATES = 1000


@dataclass(frozen=True, slots=True)
class StepOutcome:
    """What one step showed: its requested rate, whether it met every SLO, and why it should stop the climb."""

    rate: float
    slos_passed: bool
    saturated: bool = False
    untrustworthy: bool = False

    @property
    def passed(self) -> bool:
        return self.slos_passed and not self.saturated and not self.untrustworthy


def saturated(sent: int, scheduled: int) -> bool:
    """True when fewer than ``SATURATION_SHARE`` of the arrivals the schedule put in the measured window were sent
    in it (the rest dropped, or still waiting for a sender at the stop).

    Counted against the step's own schedule, not rate × window: a Poisson schedule of R·T arrivals varies by
    sqrt(R·T) (20 % at 25 arrivals), which would flag short, healthy steps as saturated.
    """
    return scheduled <= 0 or sent < SATURATION_SHARE * scheduled


def knee(history: Sequence[StepOutcome]) -> float | None:
    """The highest rate whose step passed, or None."""
    passing = [h.rate for h in history if h.passed]
    return max(passing) if passing else None


@dataclass(frozen=True, slots=True)
class Ladder:
    """Fixed, strictly increasing rates, climbed until two fails in a row, a saturated or an untrustworthy step."""

    rates: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.rates:
            raise ValueError("no rates")
        if any(not math.isfinite(r) or r <= 0 for r in self.rates):
            raise ValueError(f"rates must be positive numbers, got {list(self.rates)}")
        if any(b <= a for a, b in zip(self.rates, self.rates[1:], strict=False)):
            raise ValueError(f"rates must increase strictly, got {list(self.rates)}")
        if len(self.rates) > _MAX_RATES:
            raise ValueError(f"{len(self.rates)} rates; at most {_MAX_RATES}")

    def next_rate(self, history: Sequence[StepOutcome]) -> float | None:
        if history:
            last = history[-1]
            if last.saturated or last.untrustworthy:
                return None
            tail = history[-FAILS_IN_A_ROW:]
            if len(tail) == FAILS_IN_A_ROW and not any(h.passed for h in tail):
                return None
        return self.rates[len(history)] if len(history) < len(self.rates) else None


@dataclass(frozen=True, slots=True)
class Search:
    """Bisection for the highest passing rate in [lo, hi]."""

    lo: float
    hi: float
    max_steps: int = 8
    rel_tol: float = 0.05

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)) or self.lo <= 0 or self.hi <= self.lo:
            raise ValueError(f"expected 0 < MIN < MAX, got {self.lo:g}:{self.hi:g}")
        if self.max_steps < 2:
            raise ValueError("a search needs at least 2 steps (MIN and MAX)")

    def next_rate(self, history: Sequence[StepOutcome]) -> float | None:
        if not history:
            return self.lo
        if len(history) >= self.max_steps or history[-1].untrustworthy:
            return None
        first = history[0]
        if not first.passed:
            return None  # even MIN fails: no knee in the range
        if len(history) == 1:
            return self.hi
        best = max(h.rate for h in history if h.passed)
        above = [h.rate for h in history if not h.passed and h.rate > best]
        if not above:
            return None  # MAX passed
        worst = min(above)
        if worst - best <= self.rel_tol * best:
            return None
        return round((best + worst) / 2, 4)


SweepPlan = Ladder | Search


def linear_rates(start: float, stop: float, step: float) -> tuple[float, ...]:
    """start, start + step, … up to stop (included when it lands on it, within rounding)."""
    if not all(math.isfinite(x) for x in (start, stop, step)) or start <= 0 or step <= 0 or stop < start:
        raise ValueError(f"expected 0 < START <= STOP and STEP > 0, got {start:g}:{stop:g}:{step:g}")
    n = math.floor((stop - start) / step + 1e-9) + 1
    if n > _MAX_RATES:
        raise ValueError(f"{n} rates; at most {_MAX_RATES}")
    return tuple(round(start + i * step, 6) for i in range(n))


def geometric_rates(start: float, stop: float, factor: float) -> tuple[float, ...]:
    """start, start·factor, … up to stop (included when it lands on it, within rounding)."""
    if not all(math.isfinite(x) for x in (start, stop, factor)) or start <= 0 or factor <= 1 or stop < start:
        raise ValueError(f"expected 0 < START <= STOP and FACTOR > 1, got {start:g}:{stop:g}:{factor:g}")
    n = math.floor(math.log(stop / start) / math.log(factor) + 1e-9) + 1
    if n > _MAX_RATES:
        raise ValueError(f"{n} rates; at most {_MAX_RATES}")
    return tuple(round(start * factor**i, 6) for i in range(n))


def _numbers(text: str, count: int, form: str) -> list[float]:
    parts = text.split(":")
    if len(parts) != count:
        raise ValueError(f"expected {form}, got {text!r}")
    try:
        return [float(p) for p in parts]
    except ValueError:
        raise ValueError(f"expected {form} (numbers), got {text!r}") from None


def parse_plan(kind: str, text: str, *, max_steps: int = 8) -> SweepPlan:
    """A plan from one CLI flag's value; ``kind`` is rates, linear, geometric or search. Raises ValueError."""
    if kind == "rates":
        try:
            rates = [float(p) for p in text.split(",") if p.strip()]
        except ValueError:
            raise ValueError(f"expected comma-separated rates (req/s), e.g. 2,4,8, got {text!r}") from None
        return Ladder(tuple(rates))
    if kind == "linear":
        return Ladder(linear_rates(*_numbers(text, 3, "START:STOP:STEP")))
    if kind == "geometric":
        return Ladder(geometric_rates(*_numbers(text, 3, "START:STOP:FACTOR")))
    if kind == "search":
        lo, hi = _numbers(text, 2, "MIN:MAX")
        return Search(lo, hi, max_steps=max_steps)
    raise ValueError(f"unknown sweep kind {kind!r}")
