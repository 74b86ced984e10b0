"""Wires loadgen into Locust's events: command-line options, per-process runtime, worker → master reports, the
end-of-run flush, the report files and exit code, and a live report route on the web UI.

Run end, in every mode (headless with or without `-t`, `--processes`, the web UI's Stop): when the master's test
stops it asks every live worker for its last delta (`loadgen_flush` → `loadgen_final`) and waits for them; a worker
still running users (Locust's `-t` quits without stopping them first) stops them before it answers. Headless runs
then write the report and exit with its code. A worker is lost only when Locust marked it missing or it never
answered the flush: what it reported before is kept, its last rows are recovered from its raw shard where the
master can read it, and nothing is counted twice. Each Start begins a new run: counts from zero, fresh request ids.

A crash is never a verdict. Every process watches for unhandled exceptions (locust_plugin/crashes.py); one in any
of them fails the run (`run.failed`, exit 4), and so does a report that cannot be built (it would otherwise leave
the master waiting for ever), a headless run stopped before its end (SIGTERM: an eviction, a deleted Job), and a
headless master that quits before any run began.
Stopped from outside mid-run (SIGTERM), every worker's final delta is collected before the report (`run.interrupted`).
The run's end (the report written, a failed report, quitting) is locust_plugin/run_end.py.
"""

from __future__ import annotations

import contextlib
import gc
import math
import sys
import time
from pathlib import Path
from typing import Any

import gevent
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from loadgen.config.errors import ConfigError
from loadgen.config.overrides import parse_override
from loadgen.config.precedence import given_duration, resolved_duration
from loadgen.config.scenario import check_environment, read_document
from loadgen.exit_codes import ExitCode
from loadgen.locust_plugin import early_stop, live_metrics, locust_fixes, loop_clock
from loadgen.locust_plugin.final_flush import flush_workers, hand_over_on_quit, note_workers_at_stop, send_final
from loadgen.locust_plugin.live_state import current_report, users_per_variant
from loadgen.locust_plugin.phases import enter_phase, plan_phases, run_phases
from loadgen.locust_plugin.progress import add_progress_arguments, start_progress
from loadgen.locust_plugin.run_end import (
    collect_local_final,
    finish_run,
    note_interrupted,
    on_quitting,
    report_ui_run,
    reported,
)
from loadgen.locust_plugin.runtime import Runtime, runtime_of
from loadgen.locust_plugin.shape import StagesShape
from loadgen.locust_plugin.user import LLMUser, variant_user_classes
from loadgen.locust_plugin.web_ui import install_web_ui
from loadgen.measure.collector import Collector
from loadgen.preflight import preflight
from loadgen.traffic.senders import load_leaves_variants

__all__ = ["current_report", "register", "users_per_variant"]


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
    add_progress_arguments(g)


def _on_init(environment: Environment, **_: Any) -> None:
    opts = environment.parsed_options
    path = getattr(opts, "scenario", "") if opts is not None else ""
    if not path:
        sys.stderr.write("loadgen: --scenario FILE is required (or LOADGEN_SCENARIO)\n")
        sys.exit(ExitCode.USAGE)
    headless = bool(opts is not None and opts.headless)
    try:
        doc = read_document(path)
        # The duration from LOADGEN_DURATION / LOCUST_RUN_TIME, then --loadgen-duration / -t, over the file's
        # (config/precedence.py): a --set load.duration, validated like the file, so its rules (warm-up < duration)
        # still hold and a problem names where it came from.
        duration = resolved_duration(
            given_duration(getattr(opts, "loadgen_duration", "") or "", getattr(opts, "run_time", None))
        )
        if duration is not None:
            doc = doc.with_overrides([parse_override(f"load.duration={duration.value}", duration.source)])
        scenario = doc.validate()
    except ConfigError as e:
        sys.stderr.write(f"{e}\n")
        sys.exit(ExitCode.USAGE)
    unresolved = [v.name for v in scenario.variants if v.selector is not None]
    if unresolved:
        # Locust processes never talk to the cluster (worker pods have no token): selectors are resolved first.
        sys.stderr.write(
            f"{path}: variant(s) {', '.join(unresolved)} name a Kubernetes selector, which `loadgen run`, `loadgen "
            "sweep` and `loadgen k8s run` resolve before Locust starts; a Locust run started otherwise (locust -f, "
            "the Helm chart) needs their base_url\n"
        )
        sys.exit(ExitCode.USAGE)
    plan = None
    if scenario.load.sequential and len(scenario.variants) > 1:
        if not headless and not isinstance(environment.runner, WorkerRunner):
            sys.stderr.write(_UI_SEQUENTIAL.format(path=path))
            sys.exit(ExitCode.USAGE)
        try:  # every process runs the same phases, one variant each (locust_plugin/phases.py)
            plan = plan_phases(doc.data, scenario, path, Path(getattr(opts, "report_dir", "") or scenario.report_dir))
        except ConfigError as e:
            sys.stderr.write(f"{e}\n")
            sys.exit(ExitCode.USAGE)
    try:
        if not isinstance(environment.runner, MasterRunner):
            # The processes that send requests need the keys (on Kubernetes the master may well not have them).
            check_environment(scenario, path)
        # The checks that read files or ask servers, in every process before load: the datasets and tokenizer each
        # process samples with; the cluster Prometheus's queries where reports are written (not on a worker).
        preflight(scenario, doc, cluster=not isinstance(environment.runner, WorkerRunner))
    except ConfigError as e:
        sys.stderr.write(f"{e}\n")
        sys.exit(ExitCode.USAGE)
    raw_dir = getattr(opts, "raw_records", "") or ""
    if raw_dir:
        try:
            Path(raw_dir).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            sys.stderr.write(f"--raw-records {raw_dir}: cannot create the folder ({e.strerror or e})\n")
            sys.exit(ExitCode.USAGE)
    runner = environment.runner
    first = plan.scenarios[0] if plan is not None else scenario  # what this process runs first
    if not isinstance(runner, WorkerRunner):
        problem = load_leaves_variants(scenario, getattr(opts, "num_users", None) if opts else None)
        if problem:
            sys.stderr.write(f"{path}: {problem}\n")
            sys.exit(ExitCode.USAGE)
    _use_variant_classes(environment, scenario)
    locust_fixes.warm_stop_caller_lookup()  # after a run's imports: the stop's caller lookup then costs 0.2 ms, not 100
    rt = Runtime(environment, first, getattr(opts, "raw_records", "") or None)
    rt.crashes.install()
    environment.loadgen = rt  # type: ignore[attr-defined]
    if plan is not None:
        plan.classes = {v: c for c in environment.user_classes if (v := getattr(c, "variant", None)) is not None}
        rt.phases = plan
        enter_phase(environment, 0)
    environment.events.quitting.add_listener(note_interrupted)
    if isinstance(runner, WorkerRunner):
        environment.events.quitting.add_listener(hand_over_on_quit)
    if isinstance(runner, MasterRunner) and not environment.stop_timeout:
        # The drain (load.drain) runs in each worker's stop (Runtime.drain_in_flight); the master's stop waits for it.
        # Not Locust's graceful stop: a worker would then sleep stop_timeout more, and its final flush be lost.
        environment.stop_timeout = scenario.load.drain
    if scenario.load.stages is not None and not isinstance(runner, WorkerRunner) and plan is None:
        # Locust reads the shape after init (headless: start_shape; the web UI: shape mode), so it can be set here.
        shape = StagesShape(scenario)
        shape.runner = runner
        environment.shape_class = shape
        if environment.web_ui is not None:
            environment.web_ui.update_template_args()
    if opts is not None and not isinstance(runner, WorkerRunner):
        if getattr(opts, "num_users", None) is None:
            opts.num_users = scenario.load.users
        if getattr(opts, "spawn_rate", None) is None:
            opts.spawn_rate = scenario.load.spawn_rate
        if plan is not None and first.load.stages:  # the phases' stages are driven by phases.py, from stage 1's
            opts.num_users = first.load.stages[0].users
            opts.spawn_rate = first.load.stages[0].spawn_rate or first.load.spawn_rate
        # The run's length is load.duration, from wherever it came (config/precedence.py). Headless, loadgen ends
        # the run then (not Locust's -t timer, which would also end a sequential run after its first phase). In the
        # web UI it is the Start form's run time, prefilled (whole seconds: the form's format): a run started
        # without changing it stops by itself then (and with --autostart too).
        opts.run_time = None if headless or environment.shape_class is not None else math.ceil(scenario.load.duration)
        if environment.web_ui is not None:
            environment.web_ui.update_template_args()

    def _spawned(**_: Any) -> None:
        # Everything alive now (modules, users, streams, connections; a master's per-worker state) lives for the whole
        # run: keep it out of the cyclic GC's scans, whose full collections otherwise pause the loop that times
        # every stream.
        gc.freeze()
        if not isinstance(runner, MasterRunner):
            # Every user of the run exists (a worker hears it from its master): open-loop arrivals start now.
            rt.start_arrivals()

    environment.events.spawning_complete.add_listener(_spawned)
    # report_to_master / worker_report carry no environment: these listeners close over it.
    if isinstance(runner, WorkerRunner):
        runner.register_message("loadgen_flush", _on_flush_request)
        runner.register_message("loadgen_cadence", _on_cadence)
        runner.register_message("loadgen_run", _on_run_number)

        def _report(client_id: str, data: dict[str, Any], **_: Any) -> None:
            if rt.started:
                data["loadgen"] = rt.report_since_last()

        environment.events.report_to_master.add_listener(_report)
    else:
        rt.collector = Collector()
        if isinstance(runner, MasterRunner):
            runner.register_message("loadgen_final", _on_final)

            def _merge(client_id: str, data: dict[str, Any], **_: Any) -> None:
                payload = data.get("loadgen")
                if payload is not None and rt.collector is not None:
                    rt.collector.merge_report(client_id, payload)

            environment.events.worker_report.add_listener(_merge)
    if environment.web_ui is not None:
        install_web_ui(environment)
    # A worker's messages from its master were held until now (locust_fixes.hold_messages_until_init); they run at
    # the loop's next turn, once init's listeners are done.
    locust_fixes.initialised()


_UI_SEQUENTIAL = (
    "{path}: load.sequential: the web UI starts one run with every variant at once, and cannot run the variants one "
    "after another. Run this scenario headless, which runs each variant in turn with the same workers and writes one "
    "report: `loadgen run {path}`, `locust -f … --headless` (with --master and workers, or alone), the Helm chart's "
    "mode: headless, or `loadgen k8s run`. To watch one variant in the web UI, give it a scenario of its own; if the "
    "variants do not share a GPU, set load.sequential: false to run them together.\n"
)


def _use_variant_classes(environment: Environment, scenario: Any) -> None:
    """Replace each LLMUser subclass of the locustfile by one weighted class per variant."""
    classes: list[Any] = []
    for cls in environment.user_classes:
        if isinstance(cls, type) and issubclass(cls, LLMUser) and cls.variant is None and not cls.senders:
            classes.extend(variant_user_classes(cls, scenario))
        else:
            classes.append(cls)
    environment.user_classes[:] = classes
    if environment.available_user_classes is not None:
        environment.available_user_classes = {c.__name__: c for c in classes}


def _on_run_number(environment: Environment, msg: Any, **_: Any) -> None:
    rt = runtime_of(environment)
    rt.run_from_master = int(msg.data["run"])
    if "phase" in msg.data and rt.phases is not None:
        enter_phase(environment, int(msg.data["phase"]))
    share = (int(msg.data["worker"]), int(msg.data["workers"])) if "workers" in msg.data else None
    rt.share_from_master = share


def _on_flush_request(environment: Environment, msg: Any, **_: Any) -> None:
    send_final(environment, runtime_of(environment))


def _on_cadence(environment: Environment, msg: Any, **_: Any) -> None:
    runtime_of(environment).hist_every = max(1, int(msg.data.get("hist_every", 1)))


# How many (worker, variant, mix) histogram sets the master merges per report interval (what one costs: bench/scale.py's
# merge part). Beyond that, each worker ships its aggregate (histograms with their counters) every few intervals.
_HIST_SETS_PER_INTERVAL = 200


def hist_every(workers: int, groups: int) -> int:
    """Every how many reports a worker ships its aggregate, for `workers` workers × `groups` (variant, mix)."""
    return max(1, -(-workers * max(groups, 1) // _HIST_SETS_PER_INTERVAL))


def _on_final(environment: Environment, msg: Any, **_: Any) -> None:
    rt = runtime_of(environment)
    if rt.collector is not None:
        rt.collector.merge_report(msg.node_id, msg.data, final=True)


def _on_test_start(environment: Environment, **_: Any) -> None:
    rt = runtime_of(environment)
    runner = environment.runner
    if not isinstance(runner, MasterRunner):
        rt.on_test_start()
        run = rt.run
    else:
        # Sent before Locust's spawn messages (test_start fires first), so each worker's run starts numbered.
        run = rt.run = rt.run + 1
        # Open loop: each worker sends the share w of W of the schedule, w its rank among the workers that get
        # users now (by Locust's worker index), so the shares partition the schedule even after a worker was lost.
        active = sorted(
            (c.id for c in (*runner.clients.ready, *runner.clients.spawning, *runner.clients.running)),
            key=runner.get_worker_index,
        )
        rank = {wid: k for k, wid in enumerate(active)}
        phase = {} if rt.phases is None else {"phase": rt.phases.index}  # (a sequential run: which variant alone)
        for c in runner.clients.all:
            data: dict[str, int] = {"run": run, **phase}
            if c.id in rank:
                data |= {"worker": rank[c.id], "workers": len(active)}
            runner.send_message("loadgen_run", data, client_id=c.id)
        sc = rt.scenario
        every = hist_every(runner.worker_count, len(sc.variants) * len(sc.traffic.mixes))
        if every > 1:
            for c in runner.clients.all:
                runner.send_message("loadgen_cadence", {"hist_every": every}, client_id=c.id)
    if rt.collector is not None:
        if rt.collector.started_wall is not None:
            rt.crashes.clear()  # what crashed in an earlier run was that run's
        # A new run starts from zero: nothing of the previous one (the web UI's Start → Stop → Start).
        col = rt.collector = Collector(run)
        col.started_wall = time.time()
        opts = environment.parsed_options
        if opts is not None and opts.headless and not opts.run_time and environment.shape_class is None:
            # (A stages shape ends the run itself: its tick returns None after the last stage.)
            if rt.phases is None:
                gevent.spawn(_run_for_duration, environment)
            elif not rt.phases.running:  # phase 1 started: the phases go on from here
                rt.phases.running = True
                gevent.spawn(run_phases, environment)
        if opts is not None and opts.headless:
            start_progress(environment, col)


def _on_test_stopping(environment: Environment, **_: Any) -> None:
    rt = getattr(environment, "loadgen", None)
    if rt is not None:
        rt.stopping = True
        rt.begin_stop()
        # The window ends when the stop begins (the drain after it is outside): a master's stop then waits (in 50 ms
        # steps: locust_fixes.quicken_polls) for the workers' users.
        if rt.collector is not None and rt.collector.stopped_wall is None:
            rt.collector.stopped_wall = time.time()
        if isinstance(environment.runner, MasterRunner) and rt.collector is not None:
            note_workers_at_stop(environment.runner, rt.collector)
        elif not isinstance(environment.runner, MasterRunner):
            rt.drain_in_flight()  # before Locust kills the users: what is in flight finishes, measured whole
            # Then Locust kills at once what is left (it is cut by the stop). A master sends its stop_timeout to its
            # workers with every spawn; left there, a worker would wait that long again for users that have nothing
            # more to send, then sleep as long again before it answers the final flush.
            environment.stop_timeout = 0


def _on_test_stop(environment: Environment, **_: Any) -> None:
    rt = runtime_of(environment)
    runner = environment.runner
    col = rt.collector
    if col is not None and col.stopped_wall is None:
        col.stopped_wall = time.time()
    if not isinstance(runner, MasterRunner):
        rt.on_test_stop()
        if col is not None and not col.flushed:
            collect_local_final(rt)
    elif col is not None and not col.flushed:
        flush_workers(runner, col)
    opts = environment.parsed_options
    if col is not None and opts is not None and not opts.headless:
        report_ui_run(environment)  # a web-UI run's report, as a headless run's


def _run_for_duration(environment: Environment) -> None:
    # (gevent.sleep brings the loop's clock to now: see loop_clock.py)
    gevent.sleep(runtime_of(environment).scenario.load.duration)
    finish_run(environment)


def register() -> None:
    """Attach loadgen's listeners to Locust's global event hooks, idempotently through EventHook's public API: each
    listener is removed (when there) before it is added, so a second call moves them behind any added in between."""
    locust_fixes.install(reported)
    for hook, listener in (
        (events.init_command_line_parser, _add_arguments),
        (events.init, _on_init),
        (events.test_start, _on_test_start),
        (events.test_stopping, _on_test_stopping),
        (events.test_stop, _on_test_stop),
        (events.quitting, on_quitting),
    ):
        with contextlib.suppress(ValueError):  # not attached yet
            hook.remove_listener(listener)
        hook.add_listener(listener)
    live_metrics.register()
    early_stop.register(finish_run)  # (after the plugin's test_start: the run's collector exists)
    loop_clock.register()  # the last init listener: Locust arms its -t timer next
