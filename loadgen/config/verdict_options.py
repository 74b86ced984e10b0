"""What the verdict counts besides the SLOs: per-request SLOs that define goodput, when the load generator itself is
to be distrusted (run trust), and what makes a request cold.

- `goodput`: per-request bounds (e.g. TTFT ≤ 2 s and TPOT ≤ 50 ms, as DistServe defines goodput): a request counts
  toward goodput when it succeeded and met every bound; the report gives goodput (requests/s) beside throughput,
  and per bound how many requests breached it.
- `run_trust`: the thresholds past which a worker's own measurements (event-loop lag, CPU, open-loop schedule
  slip) make the run untrustworthy (exit 3, naming the worker and what was measured).
- `cold_starts`: a request is cold when it is the first its worker sent to the variant in the run, the first on a
  new connection, or the first after an idle gap longer than `idle_gap` (scale-to-zero deployments wake up on it);
  cold requests are reported apart from the warm steady state.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from loadgen.config.errors import SubpathIssues
from loadgen.config.types import Duration, PositiveFloat

__all__ = ["ColdStarts", "Goodput", "RunTrust"]


class Goodput(BaseModel):
    """Per-request bounds, in milliseconds: a successful request meeting every bound given counts toward goodput."""

    model_config = ConfigDict(extra="forbid")

    ttft_ms: PositiveFloat | None = Field(default=None, description="Time to first token of the request.")
    tpot_ms: PositiveFloat | None = Field(default=None, description="Its time per output token after the first.")
    e2e_ms: PositiveFloat | None = Field(default=None, description="Its end-to-end time, from the request write.")
    itl_max_ms: PositiveFloat | None = Field(
        default=None, description="Its longest gap between tokens (a stall mid-stream)."
    )
    queue_delay_ms: PositiveFloat | None = Field(
        default=None, description="Open loop: how late it was sent after its scheduled time."
    )

    @model_validator(mode="after")
    def _check(self) -> Goodput:
        if not self.bounds():
            raise SubpathIssues([((), "give at least one bound, e.g. {ttft_ms: 2000, tpot_ms: 50}")])
        return self

    def bounds(self) -> dict[str, float]:
        """The bounds given, by metric name (ttft, tpot, e2e, itl_max, queue_delay), in milliseconds."""
        return {name.removesuffix("_ms"): v for name, v in self.model_dump().items() if v is not None}


class RunTrust(BaseModel):
    """When the load generator is distrusted: any worker past one of these makes the run exit 3."""

    model_config = ConfigDict(extra="forbid")

    loop_lag_p99_ms: PositiveFloat = Field(
        default=20.0,
        description="Event-loop lag p99 (how late the worker's loop wakes: every timestamp on it can be that late).",
    )
    cpu_percent_p90: PositiveFloat = Field(
        default=95.0, description="Worker CPU p90, percent of one core (a saturated worker reads sockets late)."
    )
    schedule_slip_p99_ms: PositiveFloat = Field(
        default=5.0,
        description="Open loop: how late the dispatcher handed arrivals out, p99 (the schedule the target saw was "
        "not the one asked for).",
    )


class ColdStarts(BaseModel):
    """What makes a request cold (reported apart from the warm steady state)."""

    model_config = ConfigDict(extra="forbid")

    idle_gap: Duration = Field(
        default=30.0,
        gt=0,
        description="A request sent after its variant was idle on its worker longer than this (no request of the "
        "variant in flight there) is cold: a scale-to-zero deployment may have gone to sleep.",
    )
