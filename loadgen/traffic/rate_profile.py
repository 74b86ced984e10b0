"""Open-loop rates that change over the run: stages of constant or linearly ramping rate, applied to an arrival
process by time rescaling.

A schedule of stages is drawn at rate 1 (its kind's gaps: exponential, gamma, or constant 1) in *operational
time* u, and arrival u is sent at the real time t where the cumulative rate Λ(t) = ∫₀ᵗ R(s) ds reaches u. For a
Poisson process this gives exactly a Poisson process of intensity R(t) (the time-rescaling theorem); for gamma and
constant gaps it keeps their shape, locally scaled to the rate of the moment. Over [t0, t1] the expected count is
Λ(t1) − Λ(t0). A stage of rate 0 sends nothing; after the last stage the schedule ends.

Pure: the standard library only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

__all__ = ["RateProfile", "Segment"]


@dataclass(frozen=True, slots=True)
class Segment:
    """[start, start + duration): the rate goes linearly from `r0` to `r1` (equal for a step)."""

    start: float
    duration: float
    r0: float
    r1: float

    @property
    def area(self) -> float:
        return self.duration * (self.r0 + self.r1) / 2

    def offset_of(self, x: float) -> float:
        """The time into the segment at which its cumulative rate reaches `x` (0 <= x <= area).

        Solves r0·τ + (r1 − r0)·τ²/(2d) = x in the form 2x / (r0 + sqrt(r0² + 2·slope·x)), which stays exact as the
        slope goes to 0 and for falling ramps (no cancellation between nearly equal terms)."""
        slope = (self.r1 - self.r0) / self.duration
        root = math.sqrt(max(self.r0 * self.r0 + 2 * slope * x, 0.0))
        denominator = self.r0 + root
        return min(self.duration, 2 * x / denominator) if denominator > 0 else 0.0


class RateProfile:
    """Stages `(duration, rate, ramp)` in order from t = 0; a ramp starts from the previous stage's rate (0 for
    the first)."""

    __slots__ = ("segments", "duration")

    def __init__(self, stages: Iterable[tuple[float, float, bool]]) -> None:
        segments: list[Segment] = []
        t, previous = 0.0, 0.0
        for duration, rate, ramp in stages:
            if not (math.isfinite(duration) and duration > 0):
                raise ValueError(f"a stage's duration must be a finite number of seconds above 0, got {duration!r}")
            if not (math.isfinite(rate) and rate >= 0):
                raise ValueError(f"a stage's rate must be a finite number >= 0, got {rate!r}")
            segments.append(Segment(t, duration, previous if ramp else rate, rate))
            t += duration
            previous = rate
        if not segments:
            raise ValueError("a rate profile needs at least one stage")
        if not any(s.area > 0 for s in segments):
            raise ValueError("every stage has rate 0: nothing would be sent")
        self.segments = tuple(segments)
        self.duration = t

    def cumulative(self, t: float) -> float:
        """Λ(t): the expected number of arrivals in [0, t]."""
        total = 0.0
        for s in self.segments:
            if t >= s.start + s.duration:
                total += s.area
                continue
            if t > s.start:
                tau = t - s.start
                total += s.r0 * tau + (s.r1 - s.r0) * tau * tau / (2 * s.duration)
            break
        return total

    def mean_rate(self, t0: float, t1: float) -> float:
        """Expected arrivals per second over [t0, t1]."""
        if t1 <= t0:
            raise ValueError(f"empty interval [{t0!r}, {t1!r}]")
        return (self.cumulative(t1) - self.cumulative(t0)) / (t1 - t0)

    def rescale(self, unit_times: Iterable[float]) -> Iterator[float]:
        """Real send times of a non-decreasing schedule drawn at rate 1, until the last stage ends."""
        segments = iter(self.segments)
        seg = next(segments)
        before = 0.0  # Λ at the start of seg
        for u in unit_times:
            while u > before + seg.area:
                before += seg.area
                nxt = next(segments, None)
                if nxt is None:
                    return
                seg = nxt
            yield seg.start + seg.offset_of(u - before)
