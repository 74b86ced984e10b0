"""`loadgen sweep`: each variant alone, one step after another, at increasing open-loop rates (``--rates``,
``--linear``, ``--geometric``, ``--search``) or closed-loop concurrencies (``--concurrency``, ``--concurrency-linear``,
``--concurrency-geometric``, ``--concurrency-search``); every step is a scenario of its own run as `loadgen run`
runs one, and the curves and knees go to sweep.json / sweep.md (report/sweep.py) and sweep.html (the same knees and
the latency–throughput curves drawn, self-contained like report.html: report/html.py)."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import yaml

from loadgen.cli.scenario_args import add_set_argument, read_with_overrides
from loadgen.config.durations import parse_duration
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import Scenario, ScenarioDocument, check_environment, load_scenario, validate_scenario
from loadgen.config.variant_doc import single_variant_doc
from loadgen.exit_codes import ExitCode
from loadgen.metric_names import SCHEDULED_METRICS
from loadgen.preflight import preflight
from loadgen.traffic.sweeps import Search, SweepBy, SweepPlan, parse_plan
from loadgen.traffic.trace_file import trace_of

__all__ = ["add_sweep_parser", "cmd_sweep"]

# Flag (argparse dest) -> what it sweeps and the plan kind parse_plan reads.
_PLAN_FLAGS: dict[str, tuple[SweepBy, str]] = {
    "rates": ("rate", "list"),
    "linear": ("rate", "linear"),
    "geometric": ("rate", "geometric"),
    "search": ("rate", "search"),
    "concurrency": ("concurrency", "list"),
    "concurrency_linear": ("concurrency", "linear"),
    "concurrency_geometric": ("concurrency", "geometric"),
    "concurrency_search": ("concurrency", "search"),
}


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _sweep_plan(args: argparse.Namespace) -> tuple[SweepPlan, dict[str, Any]] | str:
    """The plan the flags ask for (and its description for sweep.json), or the usage error naming the flag."""
    chosen = next(((dest, getattr(args, dest)) for dest in _PLAN_FLAGS if getattr(args, dest) is not None), None)
    if chosen is None:
        return "one of " + ", ".join(_flag(d) for d in _PLAN_FLAGS) + " is required"
    dest, text = chosen
    by, kind = _PLAN_FLAGS[dest]
    if args.max_steps is not None and kind != "search":
        return "--max-steps: applies to --search and --concurrency-search only (a ladder's steps are its levels)"
    max_steps = 8 if args.max_steps is None else args.max_steps
    if max_steps < 2:
        return f"--max-steps: a search needs at least 2 steps, got {max_steps}"
    try:
        plan = parse_plan(kind, text, by=by, max_steps=max_steps)
    except ValueError as e:
        return f"{_flag(dest)}: {e}"
    # The flag's own name is the plan's kind: `rates`, `linear`, … as before, `concurrency-linear`, … for users.
    spec: dict[str, Any] = {"by": by, "kind": _flag(dest)[2:], "spec": text}
    if isinstance(plan, Search):
        spec |= {"max_steps": plan.max_steps, "rel_tol": plan.rel_tol}
    return plan, spec


def _step_doc(raw: dict[str, Any], sc: Scenario, index: int, rate: float, duration: str, out: Path) -> dict[str, Any]:
    """The scenario of one rate step: only variant ``index`` (with the SLOs that apply to it), open loop at ``rate``.
    A trace sent at its own times keeps them, compressed or stretched to ``rate`` (its ``time_scale``): the bursts
    of production at this step's mean rate."""
    doc = single_variant_doc(raw, sc, index)
    load = dict(doc.get("load") or {})
    load.pop("think_time", None)  # closed loop only
    arrival: dict[str, Any] = {"kind": "poisson", "rate": rate}
    trace = sc.traffic.trace
    if trace is not None and sc.load.arrival is not None and sc.load.arrival.kind == "trace":
        window = trace_of(trace)  # read by the preflight; its rate at the scenario's own time_scale
        native = len(window.rows) / window.span_s if window.span_s > 0 else rate
        doc["traffic"] = {
            **doc["traffic"],
            "trace": {**doc["traffic"]["trace"], "time_scale": trace.time_scale * native / rate},
        }
        arrival = {"kind": "trace"}
    elif isinstance(load.get("arrival"), dict):  # keep the scenario's arrival process, at this step's rate
        arrival = {**load["arrival"], "rate": rate}
        arrival.pop("stages", None)  # a step holds one rate
    load |= {"arrival": arrival, "duration": duration}
    doc["load"] = load
    doc["report_dir"] = str(out)
    return doc


def _closed_step_doc(
    raw: dict[str, Any], sc: Scenario, index: int, users: int, duration: str, out: Path
) -> dict[str, Any]:
    """The scenario of one concurrency step: only variant ``index`` (with its SLOs), closed loop with ``users``
    users and the scenario's think time."""
    doc = single_variant_doc(raw, sc, index)
    load = dict(doc.get("load") or {})
    for key in ("arrival", "overflow", "stages"):  # open loop's, and a step holds one concurrency
        load.pop(key, None)
    load |= {"users": users, "duration": duration}
    doc["load"] = load
    doc["report_dir"] = str(out)
    return doc


def _write_step(doc: dict[str, Any], out: Path) -> tuple[Path, Scenario]:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path, load_scenario(path)


def _sweep_scenario(doc: ScenarioDocument) -> tuple[Scenario, dict[str, Any]]:
    """The scenario (validated and preflighted) and its raw document (`--set` overrides applied). A rate sweep sets
    load.arrival itself, so a file without it may already hold open-loop SLOs (queue_delay, e2e_from_schedule): it
    is validated as if it had one."""
    try:
        sc = doc.validate()
    except ConfigError as first:
        try:
            raw = doc.data
            load = raw.get("load") or {}
            if not isinstance(load, dict) or load.get("arrival") is not None:
                raise first from None
            patched = {**load, "arrival": {"kind": "poisson", "rate": 1.0}}
            patched.pop("think_time", None)
            sc = validate_scenario({**raw, "load": patched}, doc.source)
        except Exception:
            raise first from None
    preflight(sc, doc)  # the dataset, the tokenizer, the cluster Prometheus: before any step
    return sc, doc.data


def _closed_loop_problem(sc: Scenario, plan: SweepPlan) -> str | None:
    """Why this scenario cannot be swept by concurrency, said before any load; None if it can."""
    for i, slo in enumerate(sc.slos):
        # Refused rather than dropped: a sweep that quietly skipped one of the user's SLOs would report knees that
        # SLO never judged, and exit 0 as if it had.
        if slo.metric in SCHEDULED_METRICS:
            return (
                f"slos[{i}] ({slo.describe()}): {slo.metric} needs an open-loop schedule, and a concurrency sweep "
                "runs closed loop (users send when they are free); remove the SLO, or sweep rates (--rates, …)"
            )
    top = int(plan.highest)
    spawn_s = top / sc.load.spawn_rate
    if spawn_s > sc.load.warmup:
        # Users still starting inside the window would measure a lower concurrency than the step's.
        return (
            f"load.warmup ({sc.load.warmup:g}s) is shorter than the {spawn_s:g}s load.spawn_rate "
            f"({sc.load.spawn_rate:g}/s) takes to start the sweep's {top} users: raise load.spawn_rate or load.warmup"
        )
    return None


def cmd_sweep(args: argparse.Namespace) -> int:
    from loadgen.k8s.api import K8sError
    from loadgen.k8s.resolve import resolve_scenario_file
    from loadgen.locust_plugin.launcher import (
        RunOptions,
        default_workers,
        refused_before_load,
        run_scenario,
        set_aside_reports,
    )
    from loadgen.report.sweep import concurrency_step_row, render_sweep_markdown, step_outcome, step_row, sweep_json

    path = Path(args.file)
    try:
        # Selector variants: resolved once, so that every step runs against the same Services.
        path = resolve_scenario_file(path) or path
    except K8sError as e:
        print(f"loadgen: {e}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        sc, raw = _sweep_scenario(read_with_overrides(path, args))
        check_environment(sc, str(path))
    except ConfigError as e:
        print(e, file=sys.stderr)
        return ExitCode.USAGE
    chosen = _sweep_plan(args)
    if isinstance(chosen, str):
        print(f"loadgen: {chosen}", file=sys.stderr)
        return ExitCode.USAGE
    plan, plan_json = chosen
    by_users = plan_json["by"] == "concurrency"
    duration = args.step_duration or f"{sc.load.duration:g}s"
    try:
        step_s = parse_duration(duration)
    except ValueError as e:
        print(f"loadgen: --step-duration: {e}", file=sys.stderr)
        return ExitCode.USAGE
    if step_s <= sc.load.warmup:
        print(
            f"loadgen: --step-duration: {duration} must be longer than load.warmup ({sc.load.warmup:g}s), "
            "or a step measures nothing",
            file=sys.stderr,
        )
        return ExitCode.USAGE
    if args.required_rate is not None and (by_users or args.required_rate <= 0):
        print("loadgen: --required-rate: a rate above 0 req/s, for a rate sweep (--rates, …)", file=sys.stderr)
        return ExitCode.USAGE
    problem = _closed_loop_problem(sc, plan) if by_users else None
    if problem:
        print(f"loadgen: {problem}", file=sys.stderr)
        return ExitCode.USAGE

    def step_doc(i: int, level: float, out: Path) -> dict[str, Any]:
        if by_users:
            return _closed_step_doc(raw, sc, i, int(level), duration, out)
        return _step_doc(raw, sc, i, level, duration, out)

    report_dir = Path(args.report_dir or sc.report_dir)
    first = plan.next_level([])
    assert first is not None
    for i, v in enumerate(sc.variants):  # every step scenario is valid before any load
        try:
            _write_step(step_doc(i, first, report_dir / v.name), report_dir / v.name / "check")
        except ConfigError as e:
            print(f"loadgen: the step scenario of variant {v.name!r} is invalid:\n{e}", file=sys.stderr)
            return ExitCode.USAGE
        shutil.rmtree(report_dir / v.name / "check", ignore_errors=True)
    refused = refused_before_load(sc, str(path))
    if refused is not None:
        return refused
    for name in ("sweep.json", "sweep.md", "sweep.html"):  # an earlier sweep's result must never pass for this one's
        if (report_dir / name).exists():
            (report_dir / name).replace(report_dir / name.replace("sweep.", "sweep.previous.", 1))
    workers = args.workers
    if workers is None:
        workers, why = default_workers()
        print(f"loadgen: {why}; --workers N to change", file=sys.stderr, flush=True)
    if by_users:
        plan_json["think_time_s"] = sc.load.think_time
    else:
        plan_json["arrival"] = ((raw.get("load") or {}).get("arrival") or {}).get("kind", "poisson")
    curves: dict[str, list[dict[str, Any]]] = {}
    for i, v in enumerate(sc.variants):  # one after another: variants never share the machine's cores
        steps = curves[v.name] = []
        while (level := plan.next_level([step_outcome(s) for s in steps])) is not None:
            what = f"{int(level)} users" if by_users else f"{level:g} req/s"
            tag = f"{int(level)}users" if by_users else f"{level:g}rps"
            out = report_dir / v.name / f"step-{len(steps) + 1:02d}-{tag}"
            step_path, step_sc = _write_step(step_doc(i, level, out), out)
            set_aside_reports(out)
            print(f"loadgen sweep: {v.name} at {what} for {duration} …", file=sys.stderr, flush=True)
            code = run_scenario(step_sc, RunOptions(scenario_path=step_path, workers=workers, report_dir=out))
            report_path = out / "report.json"
            report = orjson.loads(report_path.read_bytes()) if report_path.exists() else None
            if by_users:
                row = concurrency_step_row(int(level), report, str(report_path), code, steps)
            else:
                row = step_row(level, report, str(report_path), code)
            steps.append(row)
            verdict = "saturated" if row.get("saturated") else "passed" if row["passed"] else "failed"
            print(f"loadgen sweep: {v.name} at {what} {verdict} (exit {code})", file=sys.stderr, flush=True)
    doc = sweep_json(sc.name, plan_json, step_s, curves, args.required_rate)
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "sweep.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    from loadgen.report.html import render_sweep_html

    (report_dir / "sweep.html").write_text(render_sweep_html(doc), encoding="utf-8")
    md = render_sweep_markdown(doc)
    (report_dir / "sweep.md").write_text(md, encoding="utf-8")
    if not args.quiet:
        print(md)
        print(f"Sweep: {report_dir / 'sweep.json'}  {report_dir / 'sweep.md'}  {report_dir / 'sweep.html'}")
        print(f"Open in a browser: {(report_dir / 'sweep.html').resolve().as_uri()}")
    return int(doc["exit_code"])


def add_sweep_parser(sub: Any, whole_number: Callable[[str], int]) -> None:
    """The `sweep` subcommand's flags on ``sub`` (argparse's subparsers); ``whole_number`` parses counts."""
    sw = sub.add_parser(
        "sweep",
        help="load each variant at increasing open-loop rates or closed-loop concurrencies; curves and knee in "
        "sweep.{json,md,html}",
    )
    sw.add_argument("file")
    add_set_argument(sw)
    plan = sw.add_mutually_exclusive_group(required=True)
    plan.add_argument("--rates", default=None, help="comma-separated rates in req/s, e.g. 2,4,8")
    plan.add_argument("--linear", default=None, help="START:STOP:STEP in req/s, e.g. 2:20:2")
    plan.add_argument("--geometric", default=None, help="START:STOP:FACTOR in req/s, e.g. 1:64:2")
    plan.add_argument("--search", default=None, help="MIN:MAX in req/s: bisect for the highest rate meeting every SLO")
    plan.add_argument("--concurrency", default=None, help="closed loop: comma-separated numbers of users, e.g. 1,2,4,8")
    plan.add_argument("--concurrency-linear", default=None, help="closed loop: START:STOP:STEP users, e.g. 4:32:4")
    plan.add_argument(
        "--concurrency-geometric",
        default=None,
        help="closed loop: START:STOP:FACTOR users, e.g. 1:64:2 (rounded to whole users)",
    )
    plan.add_argument(
        "--concurrency-search",
        default=None,
        help="closed loop: MIN:MAX users: bisect (whole numbers) for the highest concurrency meeting every SLO",
    )
    sw.add_argument(
        "--max-steps",
        type=whole_number,
        default=None,
        help="--search / --concurrency-search: steps per variant at most (default 8, MIN and MAX included)",
    )
    sw.add_argument(
        "--step-duration", default=None, help="each step's length, warm-up included (default: load.duration)"
    )
    sw.add_argument(
        "--workers",
        type=whole_number,
        default=None,
        help="worker processes besides the master (0 = one local process; default: one per core but one)",
    )
    sw.add_argument(
        "--report-dir", default=None, help="where sweep.json / sweep.md / sweep.html and every step's report go"
    )
    sw.add_argument(
        "--required-rate",
        type=float,
        default=None,
        help="rate sweeps: the req/s to serve meeting every SLO; each variant is priced at it ($ / 1M output tokens, "
        "variants[].cost: between the steps around it, with the replicas its knee needs) and the cheapest named "
        "(default: rank the variants by their cost at the knee)",
    )
    sw.add_argument("--quiet", action="store_true", help="do not print the Markdown table (nor the files' paths)")
