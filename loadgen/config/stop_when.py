"""`stop_when:` — end a run early once its answer is known: an SLO breached beyond doubt, a variant failing most of
its requests over a sliding window, N failures in a row, or a target that refuses every connection for T seconds.

A nightly run against a broken deployment then ends in seconds instead of after its hour. A run stopped early is
never a pass: it exits 1 whatever the rule (a target that could not be reached is a breach too), and the report
says which rule, for which variant, and when (`run.stopped_early`) and, for `slo_breached`, which test decided it and
the most it can stop a run that meets its SLOs. The rules are judged by measure/early_stop.py.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StrictInt, model_validator

from loadgen.config.errors import SubpathIssues
from loadgen.config.types import Duration

__all__ = ["ErrorRateStop", "SloBreachStop", "StopWhen"]

_Percent = Annotated[float, Field(gt=0, le=100, allow_inf_nan=False, strict=True)]


class SloBreachStop(BaseModel):
    """Stop when an SLO of a whole variant is already breached by its failures alone."""

    model_config = ConfigDict(extra="forbid")

    min_requests: StrictInt = Field(
        default=50,
        ge=1,
        description="Closed loop: requests of the variant that must have completed in the measured window before the "
        "rule judges. The test's error rate holds at any count without it; it keeps a run's first few requests (a "
        "cold start's) from deciding alone.",
    )
    confidence: Annotated[float, Field(ge=0.9, lt=1, allow_inf_nan=False, strict=True)] = Field(
        default=0.999,
        description="Closed loop: the rule stops a run in which every variant's failure share is within what each "
        "SLO allows with a chance of at most 1 - confidence, however often it is judged (twice a second, for the "
        "whole run). The "
        "test is sequential, valid under continuous monitoring: Robbins' beta-binomial mixture confidence sequence "
        "(Jeffreys prior) of the failure share, whose lower end must exceed the allowed share; 1 - confidence is "
        "split evenly over the (variant, SLO) pairs judged. Open loop needs no confidence: the planned arrivals of "
        "the window are known, and the rule stops only when the failures alone exceed the share of all of them the "
        "SLO allows (certain, whatever the rest do).",
    )


class ErrorRateStop(BaseModel):
    """Stop when a variant's share of failed requests over a sliding window is above a bound."""

    model_config = ConfigDict(extra="forbid")

    above_percent: _Percent = Field(description="Failed share of the window's requests, in percent, that stops.")
    window: Duration = Field(
        default=30.0, gt=0, description="The sliding window (requests that ended in its last this many seconds)."
    )
    min_requests: StrictInt = Field(
        default=20, ge=1, description="Requests the window must hold before the rule judges."
    )


class StopWhen(BaseModel):
    """Rules that end the run early (any one suffices). Judged per variant, warm-up included except for
    `slo_breached` (SLOs are judged on the measured window). Each sending process ships its counts to the master
    with its report (every ~3 s); the master judges and stops every worker."""

    model_config = ConfigDict(extra="forbid")

    slo_breached: SloBreachStop | None = Field(
        default=None,
        description="A success_rate SLO, or a p-quantile / max / mean SLO of ttft or e2e (whose failed requests are "
        "censored above every measured value), of a whole variant (no mix or class), breached by the failures alone. "
        "Exit 1. `{}` takes the defaults.",
    )
    error_rate: ErrorRateStop | None = Field(
        default=None, description="A variant's failed share over a sliding window above a bound. Exit 1."
    )
    consecutive_failures: StrictInt | None = Field(
        default=None,
        ge=1,
        description="A variant's requests failed this many times in a row on one process (no success between). Exit 1.",
    )
    unreachable_for: Duration | None = Field(
        default=None,
        gt=0,
        description="Every request to a variant failed to connect (no response at all) for this long. Exit 1: a "
        "dead target is a breach.",
    )

    @model_validator(mode="after")
    def _check(self) -> StopWhen:
        rules = (self.slo_breached, self.error_rate, self.consecutive_failures, self.unreachable_for)
        if all(r is None for r in rules):
            raise SubpathIssues(
                [((), "give at least one rule: slo_breached, error_rate, consecutive_failures or unreachable_for")]
            )
        return self
