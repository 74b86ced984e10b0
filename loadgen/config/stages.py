"""Load that changes over the run: stages of closed-loop users (`load.stages`, sent through Locust's
`LoadTestShape`) or of open-loop rates (`load.arrival.stages`, drawn into the arrival schedule itself).

A stage lasts `duration`; stages follow one another from the run's start, and together they are the run
(`load.duration` defaults to their sum and must equal it when given). An open-loop stage may `ramp`: its rate then
climbs (or falls) linearly from the previous stage's rate (0 before the first) to its own over the stage.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt

from loadgen.config.types import Duration, PositiveFloat

__all__ = ["RateStage", "UserStage", "stage_ends"]


class UserStage(BaseModel):
    """Closed loop: `users` concurrent users for `duration`, reached at `spawn_rate` users/s."""

    model_config = ConfigDict(extra="forbid")

    duration: Duration = Field(gt=0, description="Length of this stage (seconds, or e.g. `2m`).")
    users: StrictInt = Field(ge=0, description="Concurrent users during this stage, all workers together.")
    spawn_rate: PositiveFloat | None = Field(
        default=None,
        description="Users started (or stopped) per second on entering this stage. Null: `load.spawn_rate`.",
    )


class RateStage(BaseModel):
    """Open loop: `rate` requests/s for `duration` (or, with `ramp`, a linear climb to it)."""

    model_config = ConfigDict(extra="forbid")

    duration: Duration = Field(gt=0, description="Length of this stage (seconds, or e.g. `2m`).")
    rate: float = Field(
        ge=0,
        allow_inf_nan=False,
        description="Requests per second at the end of this stage (all of it without ramp), all workers together.",
    )
    ramp: StrictBool = Field(
        default=False,
        description="Climb (or fall) linearly from the previous stage's rate (0 for the first) to `rate` over "
        "this stage, instead of stepping to it.",
    )


def stage_ends(durations: list[float]) -> list[float]:
    """The time (seconds from the run's start) at which each stage ends."""
    ends, t = [], 0.0
    for d in durations:
        t += d
        ends.append(t)
    return ends
