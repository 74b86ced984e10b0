"""The load part of a scenario: closed-loop users (optionally in stages), or an open-loop arrival schedule that
those users send (one rate, or stages of rates); the run's length, warm-up and sequential variants.

Kept apart from traffic.py (what requests look like) so that no module passes 500 lines; config.scenario
re-exports every name.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, model_validator

from loadgen.config.errors import SubpathIssues
from loadgen.config.stages import RateStage, UserStage
from loadgen.config.types import Duration, PositiveFloat

__all__ = ["ARRIVAL_KIND_NAMES", "Arrival", "Load", "Overflow"]

# The schedule kinds of traffic/arrivals.py (plain data here, so config imports nothing of traffic; a unit test
# holds the two equal).
ARRIVAL_KIND_NAMES = ("poisson", "gamma", "constant", "trace")
ArrivalKindName = Literal["poisson", "gamma", "constant", "trace"]
Overflow = Literal["late", "drop"]


class Arrival(BaseModel):
    """An open-loop arrival schedule: requests are sent at seeded times, whether or not earlier ones have finished."""

    model_config = ConfigDict(extra="forbid")

    kind: ArrivalKindName = Field(
        description="poisson: exponential gaps (independent clients; vLLM bench serve's default); gamma: gamma "
        "gaps of shape `burstiness` (vLLM's --burstiness); constant: one request every 1/rate seconds; trace: "
        "the times of `traffic.trace`'s rows (no rate: the trace gives it)."
    )
    rate: PositiveFloat | None = Field(
        default=None,
        description="Requests per second over the whole run, all workers together. Every variant receives this "
        "whole schedule (the same arrival times and the same requests: results pair request by request). "
        "Required unless `stages` gives the rates.",
    )
    stages: list[RateStage] | None = Field(
        default=None,
        min_length=1,
        description="Rates that change over the run instead of one `rate`: each stage `{duration, rate, ramp}` "
        "in turn from the start (a `ramp` climbs linearly from the previous rate). The same kind of gaps "
        "throughout (the schedule is drawn at rate 1 and stretched by the rate: time rescaling). Their durations "
        "add up to `load.duration`.",
    )
    burstiness: PositiveFloat | None = Field(
        default=None,
        description="gamma only (and required there): the shape of the gaps; the gap CV is 1/sqrt(burstiness), "
        "so 1 is Poisson, < 1 burstier, > 1 more regular.",
    )

    @model_validator(mode="after")
    def _check(self) -> Arrival:
        if self.kind == "trace":
            given = [f for f in ("rate", "stages", "burstiness") if getattr(self, f) is not None]
            if given:
                raise SubpathIssues([((given[0],), "kind trace sends at the trace's own times: leave it out")])
            return self
        if self.rate is None and self.stages is None:
            raise SubpathIssues([(("rate",), "required: one rate for the whole run (or `stages` of rates)")])
        if self.rate is not None and self.stages is not None:
            raise SubpathIssues([(("rate",), "give rate or stages, not both (stages set the rate over the run)")])
        if self.stages is not None and not any(stage.rate > 0 for stage in self.stages):
            raise SubpathIssues([(("stages",), "every stage has rate 0: nothing would be sent")])
        if self.kind == "gamma" and self.burstiness is None:
            raise SubpathIssues([(("burstiness",), "gamma needs burstiness, e.g. 0.5 (burstier than Poisson)")])
        if self.kind != "gamma" and self.burstiness is not None:
            raise SubpathIssues(
                [(("burstiness",), f"applies to kind gamma only; {self.kind} has none (poisson is gamma with 1)")]
            )
        return self

    def mean_rate(self) -> float:
        """The rate, or the stages' mean rate over their whole length (requests/s); a trace's comes from its file
        (traffic.trace_file)."""
        if self.kind == "trace":
            raise ValueError("a trace's rate comes from its rows: traffic.trace_file.schedule_of")
        if self.stages is None:
            assert self.rate is not None
            return self.rate
        total = sum(stage.duration for stage in self.stages)
        previous, area = 0.0, 0.0
        for stage in self.stages:
            area += stage.duration * ((previous + stage.rate) / 2 if stage.ramp else stage.rate)
            previous = stage.rate
        return area / total


class Load(BaseModel):
    """How hard and how long: closed-loop users, or (with `arrival`) an open-loop schedule those users send."""

    model_config = ConfigDict(extra="forbid")

    users: StrictInt = Field(
        default=16,
        ge=1,
        description="Concurrent simulated users, all workers together. Closed loop: each sends its next request "
        "when its response is done. Open loop (`arrival`): the senders, split over the variants by weight on each "
        "worker, hence the cap on requests in flight (max-in-flight): an arrival that finds all of its variant's "
        "users busy is handled by `overflow`. Give each worker one per variant at least (variants × workers).",
    )
    spawn_rate: PositiveFloat = Field(default=16.0, description="Users started per second until `users` run.")
    duration: Duration = Field(
        default=60.0, gt=0, description="Length of the run, warm-up included (seconds, or e.g. `5m`)."
    )
    warmup: Duration = Field(
        default=0.0,
        ge=0,
        description="Leading part of the run excluded from results, while caches fill and users spawn; "
        "shorter than `duration`.",
    )
    stages: list[UserStage] | None = Field(
        default=None,
        min_length=1,
        description="Closed loop: user counts that change over the run, each stage `{duration, users, "
        "spawn_rate}` in turn from the start (Locust's LoadTestShape). `users` is then unused; the stages' "
        "durations add up to `duration`. Open loop: `arrival.stages` instead.",
    )
    think_time: Duration = Field(
        default=0.0,
        ge=0,
        description="Pause between a user's requests (seconds, or e.g. `500ms`); closed loop only.",
    )
    arrival: Arrival | None = Field(
        default=None,
        description="Open loop: send on this seeded schedule (times counted from each worker's run start). "
        "Null: closed loop.",
    )
    overflow: Overflow | None = Field(
        default=None,
        description="Open loop only: what an arrival that finds every user of its variant busy becomes. late "
        "(default): sent by the next free user, its lag counted in queue_delay; drop: not sent, counted as dropped.",
    )
    drain: Duration = Field(
        default=30.0,
        ge=0,
        description="At the stop, how long the requests in flight (and open-loop arrivals already due, sent by the "
        "senders as they come free) are given to finish: measured whole, in the latencies and the success rate, "
        "while throughput stays over the window. The stop ends sooner when nothing is left. A request still "
        "running after it is cut by the stop: a censored sample of E2E and TPOT (and of TTFT without a first token), "
        "a TTFT it measured kept; an arrival still waiting is not sent (a failed request). 0: cut at once.",
    )
    latency_from: Literal["schedule", "send"] | None = Field(
        default=None,
        description="Open loop only: where the ttft and e2e SLOs start the clock. schedule (default): at the "
        "arrival's scheduled time, so an arrival that waited in the client for a free sender counts its wait "
        "(ttft_from_schedule, e2e_from_schedule: what a user of the service waits); send: at the request write "
        "(the server's part alone).",
    )
    max_not_sent_percent: Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)] = Field(
        default=1.0,
        description="Open loop (closed loop has no schedule; ignored there): the share of the window's arrivals that "
        "may go unsent (dropped, or still "
        "waiting for a sender at the stop) before the run is a breach (exit 1): the target did not sustain the "
        "requested rate.",
    )
    sequential: StrictBool = Field(
        default=False,
        description="Run the variants one after another instead of together (variants that share one GPU): each "
        "variant in turn gets the whole load (all `users`, or the whole arrival schedule) for `duration`, with its "
        "own warm-up and drain and the same seeded requests, and one report holds them all. Every headless run "
        "does this: `loadgen run`, and `locust --headless` alone or as a master with its workers (the Helm chart's "
        "headless mode, `loadgen k8s run`). The web UI refuses such a scenario at its start: it runs every variant "
        "at once.",
    )
    sequential_pause: Duration = Field(
        default=0.0,
        ge=0,
        description="With `sequential`: idle time between one variant's run and the next (e.g. `30s`, for the "
        "previous variant's GPU work and caches to drain).",
    )

    @model_validator(mode="after")
    def _check(self) -> Load:
        issues: list[tuple[tuple[str | int, ...], str]] = []
        staged = self.stages if self.stages is not None else (self.arrival.stages if self.arrival else None)
        if self.stages is not None and self.arrival is not None:
            issues.append((("stages",), "closed loop only: with load.arrival, give arrival.stages (rates)"))
        elif staged is not None:
            total = sum(stage.duration for stage in staged)
            where = ("stages",) if self.stages is not None else ("arrival", "stages")
            if "duration" not in self.model_fields_set:
                self.duration = total
            elif abs(self.duration - total) > 1e-9:
                issues.append(
                    (
                        ("duration",),
                        f"is {self.duration:g}s but the {'.'.join(map(str, where))} add up to {total:g}s: "
                        "leave duration out (it defaults to their sum) or make them agree",
                    )
                )
        if self.warmup >= self.duration:
            issues.append(
                (
                    ("warmup",),
                    f"warm-up ({self.warmup:g}s) must be shorter than the duration ({self.duration:g}s), "
                    "or nothing is measured",
                )
            )
        if self.arrival is None and self.latency_from is not None:
            issues.append((("latency_from",), "applies to open loop only: set load.arrival, or leave it out"))
        if self.arrival is None and self.overflow is not None:
            issues.append((("overflow",), "applies to open loop only: set load.arrival, or leave overflow out"))
        if not self.sequential and self.sequential_pause > 0:
            issues.append((("sequential_pause",), "applies with sequential: true only"))
        if self.arrival is not None and self.think_time > 0:
            issues.append(
                (
                    ("think_time",),
                    "applies to closed loop only: with load.arrival the schedule decides when requests are sent",
                )
            )
        if issues:
            raise SubpathIssues(issues)
        return self

    @property
    def latency_clock(self) -> str:
        """Where ttft / e2e SLOs start: "schedule" in open loop unless `latency_from: send`; "send" in closed loop."""
        return "send" if self.arrival is None else (self.latency_from or "schedule")

    @property
    def overflow_policy(self) -> Overflow:
        """`overflow`, or its default `late`."""
        return self.overflow or "late"
