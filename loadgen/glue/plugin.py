"""Wires loadgen into Locust's events: command-line options, per-process runtime, worker → master reports, the
end-of-run flush, the report files and exit code, and a live report route on the web UI.

Run end (headless, no `-t`): the master stops the users after the scenario's duration, asks every worker for its
last delta (`loadgen_flush` → `loadgen_final`), writes the report, sets the exit code, then quits. Workers that never
answer are named in the report as lost: what they reported before is kept, nothing is counted twice.
"""

from __future__ import annotations

import gc
import logging
import sys
import time
from pathlib import Path
from typing import Any

import gevent
from locust import events
from locust.env import Environment
from locust.runners import STATE_MISSING, LocalRunner, MasterRunner, WorkerRunner

from ..config import load_scenario, validate_scenario
from ..config_errors import ConfigError
from ..health import HealthThresholds, verdict
from ..report import build_report, render_markdown, write_reports
from .runtime import Collector, Runtime, runtime_of

__all__ = ["register"]

log = logging.getLogger("loadgen")
_FLUSH_TIMEOUT = 15.0


def _add_arguments(parser: Any) -> None:
    g = parser.add_argument_group("loadgen")
    g.add_argument("--scenario", type=str, env_var="LOADGEN_SCENARIO", default="", help="loadgen scenario YAML file")
    g.add_argument("--report-dir", type=str, env_var="LOADGEN_REPORT_DIR", default="", help="where report.json/.md go")
    g.add_argument(
        "--raw-records", type=str, env_var="LOADGEN_RAW_RECORDS", default="", help="write raw JSONL records here"
    )
    g.add_argument(
        "--loadgen-duration",
        type=str,
        env_var="LOADGEN_DURATION",
        default="",
        help="override the scenario's load.duration (e.g. 30s)",
    )


def _on_init(environment: Environment, **_: Any) -> None:
    opts = environment.parsed_options
    path = getattr(opts, "scenario", "") if opts is not None else ""
    if not path:
        sys.stderr.write("loadgen: --scenario FILE is required (or LOADGEN_SCENARIO)\n")
        sys.exit(2)
    try:
        scenario = load_scenario(path)
    except ConfigError as e:
        sys.stderr.write(f"{e}\n")
        sys.exit(2)
    override: str = getattr(opts, "loadgen_duration", "") or ""
    if override:
        # Re-validate with the override so its rules (e.g. warm-up < duration) still hold.
        data = scenario.model_dump()
        data["load"]["duration"] = override
        try:
            scenario = validate_scenario(data, source=f"{path} (--loadgen-duration)")
        except ConfigError as e:
            sys.stderr.write(f"{e}\n")
            sys.exit(2)
    rt = Runtime(environment, scenario, getattr(opts, "raw_records", "") or None)
    environment.loadgen = rt  # type: ignore[attr-defined]
    runner = environment.runner
    if opts is not None and not isinstance(runner, WorkerRunner):
        if getattr(opts, "num_users", None) is None:
            opts.num_users = scenario.load.users
        if getattr(opts, "spawn_rate", None) is None:
            opts.spawn_rate = scenario.load.spawn_rate

    def _spawned(**_: Any) -> None:
        # Everything alive now (modules, users, lanes, connections; a master's per-worker state) lives for the whole
        # run: keep it out of the cyclic GC's scans, whose full collections otherwise pause the loop for tens of ms.
        gc.freeze()

    environment.events.spawning_complete.add_listener(_spawned)
    # report_to_master / worker_report carry no environment: these listeners close over it.
    if isinstance(runner, WorkerRunner):
        runner.register_message("loadgen_flush", _on_flush_request)
        runner.register_message("loadgen_cadence", _on_cadence)

        def _report(client_id: str, data: dict[str, Any], **_: Any) -> None:
            data["loadgen"] = rt.take_report()

        environment.events.report_to_master.add_listener(_report)
    else:
        col = rt.collector = Collector()
        if isinstance(runner, MasterRunner):
            runner.register_message("loadgen_final", _on_final)

            def _merge(client_id: str, data: dict[str, Any], **_: Any) -> None:
                payload = data.get("loadgen")
                if payload is not None:
                    col.merge_report(client_id, payload)

            environment.events.worker_report.add_listener(_merge)
    web_ui = environment.web_ui
    if web_ui is not None:
        _add_web_routes(environment)


def _on_flush_request(environment: Environment, msg: Any, **_: Any) -> None:
    rt = runtime_of(environment)
    rt.on_test_stop()
    environment.runner.send_message("loadgen_final", rt.take_report(final=True))  # type: ignore[union-attr]


def _on_cadence(environment: Environment, msg: Any, **_: Any) -> None:
    runtime_of(environment).hist_every = max(1, int(msg.data.get("hist_every", 1)))


# How many (worker, variant, mix) histogram sets the master merges per report interval: merging one costs it
# ~0.2 ms (bench/scale.py). Beyond that, each worker ships its histograms every few intervals, counters every time.
_HIST_SETS_PER_INTERVAL = 200


def hist_every(workers: int, groups: int) -> int:
    """Every how many reports a worker ships its histograms, for `workers` workers × `groups` (variant, mix)."""
    return max(1, -(-workers * max(groups, 1) // _HIST_SETS_PER_INTERVAL))


def _on_final(environment: Environment, msg: Any, **_: Any) -> None:
    rt = runtime_of(environment)
    assert rt.collector is not None
    rt.collector.merge_report(msg.node_id, msg.data, final=True)


def _on_test_start(environment: Environment, **_: Any) -> None:
    rt = runtime_of(environment)
    runner = environment.runner
    if not isinstance(runner, MasterRunner):
        rt.on_test_start()
    else:
        sc = rt.scenario
        every = hist_every(runner.worker_count, len(sc.variants) * len(sc.traffic.mixes))
        if every > 1:
            for c in runner.clients.all:
                runner.send_message("loadgen_cadence", {"hist_every": every}, client_id=c.id)
    if rt.collector is not None:
        rt.collector.started_wall = time.time()
        rt.collector.stopped_wall = None
        rt.collector.reported = False
        opts = environment.parsed_options
        if opts is not None and opts.headless and not opts.run_time:
            gevent.spawn(_run_for_duration, environment)


def _on_test_stopping(environment: Environment, **_: Any) -> None:
    rt = getattr(environment, "loadgen", None)
    if rt is not None:
        rt.stopping = True


def _on_test_stop(environment: Environment, **_: Any) -> None:
    rt = runtime_of(environment)
    if not isinstance(environment.runner, MasterRunner):
        rt.on_test_stop()
    if rt.collector is not None and rt.collector.stopped_wall is None:
        rt.collector.stopped_wall = time.time()


def _run_for_duration(environment: Environment) -> None:
    rt = runtime_of(environment)
    gevent.sleep(rt.scenario.load.duration)
    finish_run(environment)


def finish_run(environment: Environment) -> dict[str, Any]:
    """Stop the users, collect every worker's last delta, write the report, set the exit code, quit."""
    rt = runtime_of(environment)
    runner = environment.runner
    assert rt.collector is not None and runner is not None
    col = rt.collector
    col.stopped_wall = time.time()
    runner.stop()
    if isinstance(runner, MasterRunner):
        # Ask only live workers; one that went missing (killed, partitioned) is reported as lost, with what it
        # delivered before.
        alive = {c.id for c in runner.clients.all if c.state != STATE_MISSING}
        for wid in sorted(alive):
            runner.send_message("loadgen_flush", None, client_id=wid)
        deadline = time.monotonic() + _FLUSH_TIMEOUT
        while not alive <= col.final and time.monotonic() < deadline:
            gevent.sleep(0.05)
        col.seen |= alive
    else:
        _collect_local_final(rt)
    report = write_final_report(environment)
    environment.process_exit_code = report["exit_code"]
    runner.quit()
    return report


def _collect_local_final(rt: Runtime) -> None:
    """A process that is its own master: stop its monitors and move its last delta into its collector."""
    assert rt.collector is not None
    rt.on_test_stop()
    rt.collector.merge_report("local", rt.take_report(final=True), final=True)


def current_report(environment: Environment) -> dict[str, Any]:
    rt = runtime_of(environment)
    col = rt.collector
    assert col is not None
    scenario = rt.scenario
    if not isinstance(environment.runner, MasterRunner):
        rt.drain()
    if isinstance(environment.runner, LocalRunner) and not col.reported and "local" not in col.final:
        # A single process has no reports in flight: read its own aggregate without consuming it. (Once its final
        # report is in, the collector has everything; the emptied runtime would overwrite its health.)
        snapshot = Collector()
        rt.collect_reads()
        snapshot.merge_report("local", {"agg": rt.aggregate.to_wire(), "health": rt.health.to_wire()})
        col_view = _combined(col, snapshot)
    else:
        col_view = col
    started = col.started_wall or time.time()
    stopped = col.stopped_wall or time.time()
    window = max(0.0, stopped - started - scenario.load.warmup)
    runner = environment.runner
    if isinstance(runner, MasterRunner):
        label = {wid: f"worker-{runner.get_worker_index(wid)}" for wid in col_view.health}
    else:
        label = {wid: wid for wid in col_view.health}
    workers = {label[wid]: h.summary() for wid, h in sorted(col_view.health.items())}
    reasons = verdict(workers, HealthThresholds())
    run = {
        "duration_s": round(stopped - started, 3),
        "warmup_s": scenario.load.warmup,
        "users": getattr(environment.parsed_options, "num_users", None),
        "workers": workers,
        "lost_workers": [label.get(w, w) for w in col.lost_workers()],
        "untrustworthy_reasons": reasons,
    }
    return build_report(scenario, col_view.aggregate, window, run)


def _combined(a: Collector, b: Collector) -> Collector:
    out = Collector()
    out.aggregate.merge(a.aggregate)
    out.aggregate.merge(b.aggregate)
    out.health = {**a.health, **b.health}
    return out


def write_final_report(environment: Environment) -> dict[str, Any]:
    rt = runtime_of(environment)
    assert rt.collector is not None
    report = current_report(environment)
    opts = environment.parsed_options
    out_dir = Path(getattr(opts, "report_dir", "") or rt.scenario.report_dir)
    write_reports(report, out_dir)
    rt.collector.reported = True
    log.info("loadgen report written to %s (exit code %s)", out_dir, report["exit_code"])
    return report


def _on_quitting(environment: Environment, **_: Any) -> None:
    rt = getattr(environment, "loadgen", None)
    if rt is None or rt.collector is None or rt.collector.reported:
        return
    if rt.collector.started_wall is None:
        return
    if not isinstance(environment.runner, MasterRunner):
        _collect_local_final(rt)
    report = write_final_report(environment)
    if environment.process_exit_code is None:
        environment.process_exit_code = report["exit_code"]


def _add_web_routes(environment: Environment) -> None:
    from flask import Response

    app = environment.web_ui.app if environment.web_ui is not None else None
    if app is None:
        return

    @app.route("/loadgen/report.json")
    def _report_json() -> Any:
        import orjson

        return Response(orjson.dumps(current_report(environment)), mimetype="application/json")

    @app.route("/loadgen/report")
    def _report_md() -> Any:
        return Response(render_markdown(current_report(environment)), mimetype="text/markdown; charset=utf-8")


def register() -> None:
    """Attach loadgen's listeners to Locust's global event hooks (idempotent)."""
    if getattr(events, "_loadgen_registered", False):
        return
    events._loadgen_registered = True  # type: ignore[attr-defined]
    events.init_command_line_parser.add_listener(_add_arguments)
    events.init.add_listener(_on_init)
    events.test_start.add_listener(_on_test_start)
    events.test_stopping.add_listener(_on_test_stopping)
    events.test_stop.add_listener(_on_test_stop)
    events.quitting.add_listener(_on_quitting)
