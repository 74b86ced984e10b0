"""Sequential variants (`load.sequential`) in one Locust run: a headless master, with its workers or alone, runs the
variants one after another with the same processes, and writes one report — the report `loadgen run` writes from
one Locust run per variant (sequential.py), built by the same code (`combine_phases`).

Phase i is variant i alone (`single_variant_doc`: the same document and seed, so the same requests and arrival times
as every other phase: results pair request by request), with the whole load (all `users`, or the whole schedule)
for `load.duration`: its warm-up, its measured window, its drain. Every process builds the same phases from the
scenario at init (`plan_phases`). The master says which phase a run is in its `loadgen_run` message, sent before
Locust's spawn messages, and each process then runs that phase's scenario (`enter_phase`): its request streams, its
schedule; the master dispatches that variant's user class alone.

The master's `run_phases` drives the run: Locust's headless start is phase 1; at the end of each phase it stops the
users (the workers' final deltas come in), writes the phase's report, aggregate and scenario into
`REPORT_DIR/phases/<i>-<variant>/`, sleeps `load.sequential_pause`, waits for the workers to be ready again and
starts the next phase. Once every phase ran, their aggregates make the report in REPORT_DIR, whose exit code is the
run's. Closed-loop stages are driven here, phase by phase (Locust's shape would end the whole run after phase 1).

A `stop_when` rule ends the phase it fires in, and the next one starts (the report says which stopped and why). A
phase whose report cannot be written, and a run stopped from outside (SIGTERM: the phase under way reports,
interrupted, in its own folder), fail the run (exit 4): the phases' reports stay in their folders, and no combined
report is written, since it would compare variants that did not all run — as `loadgen run` does.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gevent
import yaml
from gevent.event import Event
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from loadgen.config.scenario import Scenario
from loadgen.config.stages import stage_ends
from loadgen.config.variant_doc import phase_scenarios
from loadgen.exit_codes import ExitCode
from loadgen.locust_plugin.launcher import set_aside_reports
from loadgen.locust_plugin.run_end import write_final_report
from loadgen.locust_plugin.runtime import runtime_of
from loadgen.report.build import write_reports
from loadgen.report.combine import (
    AGGREGATE_FILE,
    Phase,
    combine_phases,
    phase_dir,
    read_aggregate,
    write_aggregate,
)

__all__ = ["PhasePlan", "enter_phase", "plan_phases", "run_phases", "unfinished"]

log = logging.getLogger("loadgen")

# How long the master waits for the workers of one phase to be ready for the next (a worker answers `stop` at once:
# the plugin zeroes its stop_timeout).
_READY_TIMEOUT_S = 60.0
_STAGE_TICK_S = 1.0  # as Locust's shape worker


@dataclass
class PhasePlan:
    """A sequential scenario's phases: the whole scenario, each phase's (validated) scenario and document, where the
    reports go; and, on the master, the run's progress."""

    full: Scenario
    scenarios: list[Scenario]
    docs: list[dict[str, Any]]
    report_dir: Path
    index: int = 0
    done: list[Phase] = field(default_factory=list)
    # Closed loop: each variant's user class (the master dispatches the phase's alone); open loop has one class.
    classes: dict[str, type] = field(default_factory=dict)
    running: bool = False
    finished: bool = False
    quitting: bool = False  # the process quits (a SIGTERM, Ctrl-C): no phase starts or ends here any more
    end_now: Event = field(default_factory=Event)  # a `stop_when` rule ended the phase under way

    @property
    def variant(self) -> str:
        return self.scenarios[self.index].variants[0].name

    def out_dir(self) -> Path:
        return phase_dir(self.report_dir, self.index, self.variant)


def plan_phases(data: dict[str, Any], scenario: Scenario, source: str, report_dir: Path) -> PhasePlan:
    """The phases of `scenario`, validated from the document `data`; raises ``ConfigError``."""
    scenarios, docs = [], []
    for i, (doc, sc) in enumerate(phase_scenarios(data, scenario, source)):
        out = str(phase_dir(report_dir, i, sc.variants[0].name))
        docs.append({**doc, "report_dir": out})
        scenarios.append(sc.model_copy(update={"report_dir": out}))
    return PhasePlan(scenario, scenarios, docs, report_dir)


def enter_phase(environment: Environment, index: int) -> None:
    """This process runs phase `index` from its next run on (the master: only that variant's user class)."""
    rt = runtime_of(environment)
    plan = rt.phases
    assert plan is not None
    plan.index = index
    rt.scenario = plan.scenarios[index]
    cls = plan.classes.get(plan.variant)
    if cls is not None and not isinstance(environment.runner, WorkerRunner):
        environment.user_classes[:] = [cls]


def _say(text: str) -> None:
    log.info("loadgen: sequential: %s", text)


def _users(environment: Environment, scenario: Scenario) -> tuple[int, float]:
    """The users and spawn rate a phase starts with: the first stage's, else the run's (the command line's or the
    scenario's: the plugin put them in Locust's options)."""
    stages = scenario.load.stages
    if stages:
        return stages[0].users, stages[0].spawn_rate or scenario.load.spawn_rate
    opts = environment.parsed_options
    return int(getattr(opts, "num_users", scenario.load.users)), float(
        getattr(opts, "spawn_rate", scenario.load.spawn_rate)
    )


def _hold(environment: Environment, plan: PhasePlan) -> None:
    """Let the phase run for `load.duration` (its stages re-targeted on time), or until a `stop_when` rule ends it."""
    scenario = plan.scenarios[plan.index]
    runner = environment.runner
    assert runner is not None
    stages = scenario.load.stages or []
    ends = stage_ends([st.duration for st in stages])
    start = time.monotonic()
    stage = 0
    while True:
        left = scenario.load.duration - (time.monotonic() - start)
        if left <= 0:
            return
        gevent.get_hub().loop.update_now()  # (a timer counts from the loop's cached clock: loop_clock.py)
        if plan.end_now.wait(min(left, _STAGE_TICK_S) if stages else left):
            return
        now = time.monotonic() - start
        while stage + 1 < len(stages) and now >= ends[stage]:
            stage += 1
            st = stages[stage]
            gevent.spawn(runner.start, st.users, st.spawn_rate or scenario.load.spawn_rate)


def _workers_ready(runner: MasterRunner, expected: int) -> int:
    """Wait (bounded) until `expected` workers are ready again after a phase's stop; how many are."""
    deadline = time.monotonic() + _READY_TIMEOUT_S
    while len(runner.clients.ready) < expected and time.monotonic() < deadline:
        gevent.sleep(0.05)
    return len(runner.clients.ready)


def _start(environment: Environment, plan: PhasePlan) -> str | None:
    """Start the phase `plan.index`; why it cannot start, else None."""
    runner = environment.runner
    assert runner is not None
    rt = runtime_of(environment)
    if isinstance(runner, MasterRunner):
        expected = len(rt.collector.final) if rt.collector is not None else 0
        ready = _workers_ready(runner, max(expected, 1))
        if not ready:
            return "no worker is ready for the next phase"
        if ready < expected:
            _say(f"{ready} of the {expected} workers of the last phase are ready; going on with them")
    enter_phase(environment, plan.index)
    users, rate = _users(environment, plan.scenarios[plan.index])
    plan.end_now.clear()
    gevent.spawn(runner.start, users, rate)
    gevent.sleep(0)  # test_start fires now, in that greenlet: the phase's clock starts with it
    return None


def _write_phase(environment: Environment, plan: PhasePlan) -> Phase:
    """The phase's report and aggregate into its folder (write_final_report), read back as a `Phase`."""
    out = plan.out_dir()
    report = write_final_report(environment, out_dir=out)
    return Phase(plan.variant, report, read_aggregate(out / AGGREGATE_FILE), str(out), int(report["exit_code"]))


def run_phases(environment: Environment) -> None:
    """The master's (or a lone headless process's) sequential run: phase 1 is under way (Locust's headless start);
    the others follow; then the report of them all. Ends the run (Locust quits with the report's exit code)."""
    rt = runtime_of(environment)
    plan = rt.phases
    runner = environment.runner
    assert plan is not None and runner is not None
    plan.running = True
    n = len(plan.scenarios)
    pause = plan.full.load.sequential_pause
    try:
        for i, doc in enumerate(plan.docs):
            out = phase_dir(plan.report_dir, i, plan.scenarios[i].variants[0].name)
            out.mkdir(parents=True, exist_ok=True)
            set_aside_reports(out)
            (out / "scenario.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        for i in range(n):
            if i:
                if pause > 0:
                    _say(f"pausing {pause:g}s before variant {plan.scenarios[i].variants[0].name!r}")
                    gevent.sleep(pause)
                if plan.quitting:
                    return
                plan.index = i
                why = _start(environment, plan)
                if why is not None:
                    raise RuntimeError(why)
            _say(f"variant {plan.variant!r} ({i + 1} of {n}) for {plan.full.load.duration:g}s …")
            _hold(environment, plan)
            if plan.quitting:  # stopped from outside: quitting reports the phase under way, and ends the run
                return
            runner.stop()  # the workers' final deltas come in (the plugin's test_stop)
            phase = _write_phase(environment, plan)
            plan.done.append(phase)
            _say(f"variant {plan.variant!r} done (exit {phase.exit_code})")
        combined, agg = combine_phases(plan.full, plan.done, pause)
        write_reports(combined, plan.report_dir)
        write_aggregate(agg, plan.report_dir)
        plan.finished = True
        environment.process_exit_code = int(combined["exit_code"])
        log.info("loadgen report of the %d variants written to %s (exit code %s)", n, plan.report_dir,
                 combined["exit_code"])  # fmt: skip
    except Exception:  # noqa: BLE001 - whatever it is, the run ends, as failed
        log.exception(
            "loadgen: sequential: the run failed in variant %r's phase (%d of %d); the phases' own reports are in %s",
            plan.variant,
            plan.index + 1,
            n,
            plan.report_dir / "phases",
        )
        environment.process_exit_code = ExitCode.RUN_FAILED
        if rt.collector is not None:
            rt.collector.reported = True  # (not again at quitting)
    runner.quit()


def unfinished(environment: Environment) -> bool:
    """A sequential run under way that has not written its combined report (quitting now fails it)."""
    rt = getattr(environment, "loadgen", None)
    plan = getattr(rt, "phases", None)
    return plan is not None and plan.running and not plan.finished
