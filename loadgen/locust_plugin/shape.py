"""Closed-loop stages (`load.stages`) as a Locust `LoadTestShape`.

Locust's shape worker (on the master, or the single process) asks `tick()` once a second and re-targets the user
count whenever the answer changes; Locust's dispatcher spreads the users over the variants' classes by weight as
for a fixed count. After the last stage `tick()` returns None, so the run ends the way Locust ends a shape run: a
headless run quits (loadgen's quitting hook writes the report), the web UI stops (the final report is shown).
"""

from __future__ import annotations

from locust import LoadTestShape

from loadgen.config.scenario import Scenario
from loadgen.config.stages import stage_ends

__all__ = ["StagesShape"]


class StagesShape(LoadTestShape):
    """The scenario's user stages, in order from the run's start."""

    abstract = False

    def __init__(self, scenario: Scenario) -> None:
        super().__init__()
        stages = scenario.load.stages or []
        ends = stage_ends([st.duration for st in stages])
        default_rate = scenario.load.spawn_rate
        self.stages: list[tuple[float, int, float]] = [
            (end, st.users, st.spawn_rate or default_rate) for end, st in zip(ends, stages, strict=True)
        ]

    def at(self, run_time: float) -> tuple[int, float] | None:
        """(users, spawn rate) at `run_time` seconds into the run; None once the last stage is over."""
        for end, users, rate in self.stages:
            if run_time < end:
                return users, rate
        return None

    def tick(self) -> tuple[int, float] | None:
        return self.at(self.get_run_time())
