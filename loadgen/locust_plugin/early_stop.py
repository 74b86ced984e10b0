"""`stop_when:` in a Locust run: the master (or a local process) judges the rules twice a second on what the senders
reported (measure/early_stop.py), and the first rule met ends the run for every worker through the master's usual
end (`plugin.finish_run`: the users stop — with no drain: what is in flight is cut at once, counted `cut_by_stop` —,
every worker's final delta is collected, the report is written). The report names the rule, the variant, when and
why (`run.stopped_early`), and it exits 1 whatever the rule (report/verdict.py: never a pass). Being asked twice a
second for the whole run is why `slo_breached`'s closed-loop test is a sequential one, valid however often it is
looked at (measure/confidence_sequence.py), and the report states its guarantee.

Senders count every finished request in `Runtime.record` and ship the counts with each report (every ~3 s on a
worker); a local process hands them to its judge on each tick. With the web UI the run is stopped (not quit): its
live report carries the reason until the next Start.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import time
from collections.abc import Callable
from typing import Any

import gevent
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from loadgen.locust_plugin.runtime import runtime_of
from loadgen.measure.collector import Collector
from loadgen.measure.early_stop import StopJudge, StopReason
from loadgen.traffic.arrivals import schedule_times
from loadgen.traffic.scenario_schedule import schedule_of

__all__ = ["register", "stop_report"]

log = logging.getLogger("loadgen")
_TICK = 0.5
_STOP_NOW = "loadgen_stop_now"  # master → workers: a rule stopped the run, skip the drain
# How a headless run ends (`plugin.finish_run`, given to `register`: the plugin imports this module, not back).
_ENDS_RUN: list[Callable[[Environment], object]] = [lambda environment: None]


def planned_arrivals(scenario: Any, start: float, end: float) -> int | None:
    """Open loop: the arrivals of the schedule in (start, end] seconds of the run (each variant gets every one);
    None in closed loop."""
    schedule = schedule_of(scenario)
    if schedule is None:
        return None
    n = 0
    for t in schedule_times(schedule, scenario.seed):
        if t > end:
            break
        n += t > start
    return n


def _on_test_start(environment: Environment, **_: Any) -> None:
    rt = runtime_of(environment)
    rules = rt.scenario.stop_when
    rt.stopped_early, rt.stopped_early_now = None, False
    runner = environment.runner
    if rules is not None and isinstance(runner, WorkerRunner) and _STOP_NOW not in runner.custom_messages:
        runner.register_message(_STOP_NOW, _on_stop_now)
    if rules is None or isinstance(runner, WorkerRunner) or rt.collector is None:
        return
    load = rt.scenario.load
    judge = StopJudge(rules, rt.scenario.slos, [v.name for v in rt.scenario.variants])
    if rules.slo_breached is not None:
        judge.planned = planned_arrivals(rt.scenario, load.warmup, load.duration)
    rt.collector.stop_judge = judge
    gevent.spawn(_watch, environment, rt.collector)


def _watch(environment: Environment, col: Collector) -> None:
    """Judge until a rule is met or this run ends (a new run has a new collector)."""
    rt = runtime_of(environment)
    judge: StopJudge = col.stop_judge
    local = not isinstance(environment.runner, MasterRunner)
    while True:
        gevent.sleep(_TICK)
        if rt.collector is not col or col.stopped_wall is not None:
            return
        if local and rt.stop_counts is not None:
            judge.merge("local", rt.stop_counts.pop_wire())
        found = judge.check(time.time())
        if found is not None:
            _stop(environment, found)
            return


def _stop(environment: Environment, found: StopReason) -> None:
    rt = runtime_of(environment)
    col = rt.collector
    assert col is not None and col.started_wall is not None
    now = time.time()
    opts = environment.parsed_options
    run_time = getattr(opts, "run_time", None) if opts is not None else None
    planned_s = float(run_time) if run_time else rt.scenario.load.duration
    after = now - col.started_wall
    rt.stopped_early = {
        "rule": found.rule,
        "variant": found.variant,
        "verdict": found.verdict,
        "reason": found.reason,
        "figures": found.figures,
        "at": _dt.datetime.fromtimestamp(now, _dt.UTC).isoformat(timespec="seconds"),
        "after_s": round(after, 3),
        "planned_s": planned_s,
        # Open loop: the arrivals the schedule still held for after the stop, never sent (per variant); in closed
        # loop the users send as long as the run lasts, so no count was planned.
        "arrivals_not_reached": planned_arrivals(rt.scenario, after, planned_s),
    }
    log.warning("loadgen: stop_when %s: %s — stopping the run %.1f s into its %g s", found.rule, found.reason,
                after, planned_s)  # fmt: skip
    # No drain: what is in flight is cut at once (counted `cut_by_stop`). Told before Locust's stop, on the same
    # socket, so every worker knows it when its stop begins.
    rt.stopped_early_now = True
    if isinstance(environment.runner, MasterRunner):
        environment.runner.send_message(_STOP_NOW, {"run": col.run})
    if opts is not None and opts.headless:
        _ENDS_RUN[0](environment)
    elif environment.runner is not None:
        environment.runner.stop()


def _on_stop_now(environment: Environment, msg: Any, **_: Any) -> None:
    runtime_of(environment).stopped_early_now = True


def stop_report(rt: Any, run: dict[str, Any]) -> None:
    """Put the stop into a report's `run` facts (exit 1 whatever its verdict: an unreachable target is the target's
    breach, not a reason to distrust the load generator)."""
    stop = getattr(rt, "stopped_early", None)
    if stop is not None:
        run["stopped_early"] = stop


def register(finish_run: Callable[[Environment], object]) -> None:
    """Attach to Locust's test_start (after the plugin's own, which made the run's collector); idempotent.
    `finish_run` ends a headless run: stops the users, collects every worker's last delta, writes the report."""
    _ENDS_RUN[0] = finish_run
    with contextlib.suppress(ValueError):
        events.test_start.remove_listener(_on_test_start)
    events.test_start.add_listener(_on_test_start)
