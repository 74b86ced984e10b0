"""How a run ends, on the master (or a process that is its own master): the users stopped, the report written and
the exit code set (`finish_run`, `write_final_report`); a report that cannot be built fails the run (exit 4) rather
than leave the master waiting for ever; and at quitting, what a run stopped from outside (SIGTERM: an eviction, a
deleted Job; Ctrl-C) or cut short reports, as no verdict (`run.failed`, `run.interrupted`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path
from typing import Any

from locust.env import Environment
from locust.runners import MasterRunner

from loadgen.exit_codes import ExitCode
from loadgen.live.otlp import export_run_metrics
from loadgen.locust_plugin.live_state import current_report
from loadgen.locust_plugin.runtime import Runtime, runtime_of
from loadgen.report.build import write_reports
from loadgen.report.combine import write_aggregate

__all__ = [
    "collect_local_final",
    "finish_run",
    "note_interrupted",
    "on_quitting",
    "report_ui_run",
    "reported",
    "write_final_report",
]

log = logging.getLogger("loadgen")


def finish_run(environment: Environment) -> dict[str, Any] | None:
    """Stop the users (which collects every worker's last delta), write the report, set the exit code, quit. In a
    sequential run (locust_plugin/phases.py) this ends the phase under way, and the run goes on to the next."""
    runner = environment.runner
    assert runner is not None
    plan = getattr(runtime_of(environment), "phases", None)
    if plan is not None and plan.running:
        plan.end_now.set()
        return None
    try:
        runner.stop()
        report = write_final_report(environment)
        environment.process_exit_code = report["exit_code"]
    except Exception as e:  # noqa: BLE001 - whatever it is, the run ends, as failed
        _report_failed(environment, e)
        report = None
    runner.quit()
    return report


def report_ui_run(environment: Environment) -> None:
    """A web-UI run ended (its run time, Stop, its last stage, a `stop_when` rule): its report written as a headless
    run's, and its exit code kept for when the process quits."""
    rt = runtime_of(environment)
    col = rt.collector
    if col is None or col.reported or col.started_wall is None:
        return
    try:
        environment.process_exit_code = write_final_report(environment)["exit_code"]
    except Exception as e:  # noqa: BLE001 - the UI goes on; the run failed
        _report_failed(environment, e)


def _report_failed(environment: Environment, e: Exception) -> None:
    """The report could not be made: say why, keep the exact histograms if they can be kept, exit 4. (This is the
    greenlet that ends the run: had it died, the master would have waited for ever.)"""
    log.exception("loadgen: the run's report could not be written; the run failed (exit %d)", ExitCode.RUN_FAILED)
    rt = runtime_of(environment)
    rt.crashes.add(f"writing the report: {type(e).__name__}: {e}")
    environment.process_exit_code = ExitCode.RUN_FAILED
    if rt.collector is not None:
        rt.collector.reported = True  # not again at quitting
        with contextlib.suppress(Exception):
            write_aggregate(rt.collector.aggregate, _report_dir(environment))


def _report_dir(environment: Environment) -> Path:
    opts = environment.parsed_options
    return Path(getattr(opts, "report_dir", "") or runtime_of(environment).scenario.report_dir)


def collect_local_final(rt: Runtime) -> None:
    """A process that is its own master: stop its monitors and move its last delta into its collector."""
    assert rt.collector is not None
    rt.on_test_stop()
    rt.collector.merge_report("local", rt.report_since_last(final=True), final=True)
    rt.collector.flushed = True


def write_final_report(
    environment: Environment, failed: list[str] | None = None, out_dir: Path | None = None
) -> dict[str, Any]:
    """The run's report (and its aggregate) into `out_dir` (default: the run's report folder)."""
    rt = runtime_of(environment)
    assert rt.collector is not None
    report = current_report(environment, failed)  # each variant's own /metrics over the run included
    if rt.interrupted:
        report["run"]["interrupted"] = True
    out_dir = out_dir or _report_dir(environment)
    write_reports(report, out_dir)
    write_aggregate(rt.collector.aggregate, out_dir)  # the exact histograms, to rebuild or combine reports
    export_run_metrics(rt.scenario, report)  # `tracing.otlp_endpoint`: the summary as OTLP gauges (live/otlp.py)
    rt.collector.reported = True
    log.info("loadgen report written to %s (exit code %s)", out_dir, report["exit_code"])
    return report


def on_quitting(environment: Environment, **_: Any) -> None:
    plan = getattr(getattr(environment, "loadgen", None), "phases", None)
    if plan is not None:
        plan.quitting = True
    _on_quitting(environment)
    if plan is not None and plan.running and not plan.finished:
        # A sequential run stopped before its last phase ended: no combined report (its variants did not all run).
        log.error(
            "loadgen: the sequential run was stopped in variant %r's phase (%d of %d): no report of all variants; "
            "each phase's report is in %s; exit %d",
            plan.variant,
            plan.index + 1,
            len(plan.scenarios),
            plan.report_dir / "phases",
            ExitCode.RUN_FAILED,
        )
        environment.process_exit_code = ExitCode.RUN_FAILED


def _on_quitting(environment: Environment) -> None:
    rt = getattr(environment, "loadgen", None)
    if rt is not None and rt.collector is None and rt.raw is not None:  # a worker: what it finished to its shard
        rt.drain()
        rt.raw.close()
        rt.raw = None
        return
    if rt is None or rt.collector is None or rt.collector.reported:
        return
    opts = environment.parsed_options
    headless = bool(opts is not None and opts.headless)
    if rt.collector.started_wall is None:
        # No run, no report: a crash, or a headless master stopped before its run began, is no success (Locust
        # would exit 0, or 2 — "bad configuration" — for a crash).
        if environment.process_exit_code is None and (headless or rt.crashes.entries()):
            log.error("loadgen: no run was made; exit %d", ExitCode.RUN_FAILED)
            environment.process_exit_code = ExitCode.RUN_FAILED
        return
    col = rt.collector
    note_interrupted(environment)  # (a local runner: nothing of Locust's quits it before this)
    if rt.quitting:
        return  # a second SIGTERM while the first one's stop runs: Locust exits now, as a failed run
    rt.quitting = True
    try:
        if not isinstance(environment.runner, MasterRunner) and not col.flushed:
            collect_local_final(rt)
        cut = _cut_short(environment, rt, rt.interrupted) if headless else None
        plan = rt.phases
        phase_out = plan.out_dir() if plan is not None and plan.running else None  # the phase under way's folder
        report = write_final_report(environment, [cut] if cut else None, phase_out)
    except Exception as e:  # noqa: BLE001
        _report_failed(environment, e)
        return
    if rt.interrupted or environment.process_exit_code is None:
        environment.process_exit_code = report["exit_code"]


def note_interrupted(environment: Environment, **_: Any) -> None:
    """Quitting began mid-run: stopped from outside. First of the quitting listeners (added after the master runner's,
    which stops the run and so collects every worker's final delta, `_on_test_stop`; Locust fires them in reverse)."""
    rt = getattr(environment, "loadgen", None)
    col = None if rt is None else rt.collector
    if rt is None or col is None or col.started_wall is None or col.flushed or col.reported:
        return
    rt.interrupted = True
    if environment.process_exit_code is None:
        environment.process_exit_code = ExitCode.RUN_FAILED  # (the report's own code once it is written)


def _cut_short(environment: Environment, rt: Runtime, interrupted: bool) -> str | None:
    """A headless run whose report is written at quitting before its planned end was stopped from outside (SIGTERM:
    an eviction, a deleted Job, Ctrl-C through `loadgen run`): what it measured is reported, but as no verdict."""
    col = rt.collector
    assert col is not None and col.started_wall is not None
    run_time = getattr(environment.parsed_options, "run_time", None)
    planned = float(run_time) if run_time else rt.scenario.load.duration
    ran = (col.stopped_wall or time.time()) - col.started_wall
    if interrupted:
        return (
            f"the run was interrupted: stopped from outside {ran:.0f} s into its {planned:g} s (SIGINT / Ctrl-C, or "
            "SIGTERM: an eviction, a deleted Job); every worker's figures until then are in this report"
        )
    if ran >= planned - 1.0:  # (Locust's -t and a stages shape end the run at quitting, on time)
        return None
    return f"the run was stopped {ran:.0f} s into its {planned:g} s (a SIGTERM, or the master quit before the end)"


def reported(environment: Environment) -> bool:
    rt = getattr(environment, "loadgen", None)
    return rt is not None and rt.collector is not None and rt.collector.reported
