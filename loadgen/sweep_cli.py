"""`loadgen sweep`: each variant alone, one step after another, at increasing open-loop rates (``--rates``,
``--linear``, ``--geometric``, ``--search``); every step is a scenario of its own run as `loadgen run` runs one, and
the curves and knees go to sweep.json / sweep.md (report/sweep.py)."""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import yaml

from loadgen.config.durations import parse_duration
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import Scenario, check_environment, load_scenario, validate_scenario
from loadgen.config.variant_doc import single_variant_doc
from loadgen.exit_codes import ExitCode
from loadgen.traffic.sweeps import Search, SweepPlan, parse_plan

__all__ = ["add_sweep_parser", "cmd_sweep"]


def _sweep_plan(args: argparse.Namespace) -> tuple[SweepPlan, dict[str, Any]] | str:
    """The plan the flags ask for, or the usage error naming the flag."""
    if args.max_steps is not None and args.search is None:
        return "--max-steps: applies to --search only (a ladder's steps are its rates)"
    max_steps = 8 if args.max_steps is None else args.max_steps
    if max_steps < 2:
        return f"--max-steps: a search needs at least 2 steps, got {max_steps}"
    for kind in ("rates", "linear", "geometric", "search"):
        text = getattr(args, kind)
        if text is not None:
            try:
                plan = parse_plan(kind, text, max_steps=max_steps)
            except ValueError as e:
                return f"--{kind}: {e}"
            spec: dict[str, Any] = {"kind": kind, "spec": text}
            if isinstance(plan, Search):
                spec |= {"max_steps": plan.max_steps, "rel_tol": plan.rel_tol}
            return plan, spec
    return "one of --rates, --linear, --geometric, --search is required"


def _step_doc(raw: dict[str, Any], sc: Scenario, index: int, rate: float, duration: str, out: Path) -> dict[str, Any]:
    """The scenario of one step: only variant ``index`` (with the SLOs that apply to it), open loop at ``rate``."""
    doc = single_variant_doc(raw, sc, index)
    load = dict(doc.get("load") or {})
    load.pop("think_time", None)  # closed loop only
    arrival: dict[str, Any] = {"kind": "poisson", "rate": rate}
    if isinstance(load.get("arrival"), dict):  # keep the scenario's arrival process, at this step's rate
        arrival = {**load["arrival"], "rate": rate}
        arrival.pop("stages", None)  # a step holds one rate
    load |= {"arrival": arrival, "duration": duration}
    doc["load"] = load
    doc["report_dir"] = str(out)
    return doc


def _write_step(doc: dict[str, Any], out: Path) -> tuple[Path, Scenario]:
    out.mkdir(parents=True, exist_ok=True)
    path = out / "scenario.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path, load_scenario(path)


def _sweep_scenario(path: Path) -> tuple[Scenario, dict[str, Any]]:
    """The scenario and its raw document. A sweep sets load.arrival itself, so a file without it may already hold
    open-loop SLOs (queue_delay, e2e_from_schedule): it is validated as if it had one."""
    try:
        sc = load_scenario(path)
    except ConfigError as first:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
            load = raw.get("load") or {}
            if not isinstance(load, dict) or load.get("arrival") is not None:
                raise first from None
            patched = {**load, "arrival": {"kind": "poisson", "rate": 1.0}}
            patched.pop("think_time", None)
            sc = validate_scenario({**raw, "load": patched}, str(path))
        except Exception:
            raise first from None
        return sc, raw
    return sc, yaml.safe_load(path.read_text(encoding="utf-8"))


def cmd_sweep(args: argparse.Namespace) -> int:
    from loadgen.locust_plugin.launcher import RunOptions, default_workers, preflight, run_scenario, set_aside_reports
    from loadgen.report.sweep import render_sweep_markdown, step_outcome, step_row, sweep_json

    path = Path(args.file)
    try:
        sc, raw = _sweep_scenario(path)
        check_environment(sc, str(path))
    except ConfigError as e:
        print(e, file=sys.stderr)
        return ExitCode.USAGE
    chosen = _sweep_plan(args)
    if isinstance(chosen, str):
        print(f"loadgen: {chosen}", file=sys.stderr)
        return ExitCode.USAGE
    plan, plan_json = chosen
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
    report_dir = Path(args.report_dir or sc.report_dir)
    first = plan.next_rate([])
    assert first is not None
    for i, v in enumerate(sc.variants):  # every step scenario is valid before any load
        try:
            _write_step(_step_doc(raw, sc, i, first, duration, report_dir / v.name), report_dir / v.name / "check")
        except ConfigError as e:
            print(f"loadgen: the step scenario of variant {v.name!r} is invalid:\n{e}", file=sys.stderr)
            return ExitCode.USAGE
        shutil.rmtree(report_dir / v.name / "check", ignore_errors=True)
    problems = preflight(sc)
    if problems:
        print("loadgen: target unreachable, nothing was run:", file=sys.stderr)
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        return ExitCode.UNTRUSTWORTHY
    for name in ("sweep.json", "sweep.md"):  # a result left by an earlier sweep must never pass for this one's
        if (report_dir / name).exists():
            (report_dir / name).replace(report_dir / name.replace("sweep.", "sweep.previous.", 1))
    workers = args.workers
    if workers is None:
        workers, why = default_workers()
        print(f"loadgen: {why}; --workers N to change", file=sys.stderr, flush=True)
    plan_json["arrival"] = ((raw.get("load") or {}).get("arrival") or {}).get("kind", "poisson")
    curves: dict[str, list[dict[str, Any]]] = {}
    for i, v in enumerate(sc.variants):  # one after another: variants never share the machine's cores
        steps = curves[v.name] = []
        while (rate := plan.next_rate([step_outcome(s) for s in steps])) is not None:
            out = report_dir / v.name / f"step-{len(steps) + 1:02d}-{rate:g}rps"
            step_path, step_sc = _write_step(_step_doc(raw, sc, i, rate, duration, out), out)
            set_aside_reports(out)
            print(f"loadgen sweep: {v.name} at {rate:g} req/s for {duration} …", file=sys.stderr, flush=True)
            code = run_scenario(step_sc, RunOptions(scenario_path=step_path, workers=workers, report_dir=out))
            report_path = out / "report.json"
            report = orjson.loads(report_path.read_bytes()) if report_path.exists() else None
            row = step_row(rate, report, str(report_path), code)
            steps.append(row)
            verdict = "passed" if row["passed"] else "failed"
            print(f"loadgen sweep: {v.name} at {rate:g} req/s {verdict} (exit {code})", file=sys.stderr, flush=True)
    doc = sweep_json(sc.name, plan_json, step_s, curves)
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / "sweep.json").write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    md = render_sweep_markdown(doc)
    (report_dir / "sweep.md").write_text(md, encoding="utf-8")
    if not args.quiet:
        print(md)
        print(f"Sweep: {report_dir / 'sweep.json'}  {report_dir / 'sweep.md'}")
    return int(doc["exit_code"])


def add_sweep_parser(sub: Any, whole_number: Callable[[str], int]) -> None:
    """The `sweep` subcommand's flags on ``sub`` (argparse's subparsers); ``whole_number`` parses counts."""
    sw = sub.add_parser(
        "sweep", help="load each variant at increasing open-loop rates; curves and knee in sweep.{json,md}"
    )
    sw.add_argument("file")
    plan = sw.add_mutually_exclusive_group(required=True)
    plan.add_argument("--rates", default=None, help="comma-separated rates in req/s, e.g. 2,4,8")
    plan.add_argument("--linear", default=None, help="START:STOP:STEP in req/s, e.g. 2:20:2")
    plan.add_argument("--geometric", default=None, help="START:STOP:FACTOR in req/s, e.g. 1:64:2")
    plan.add_argument("--search", default=None, help="MIN:MAX in req/s: bisect for the highest rate meeting every SLO")
    sw.add_argument(
        "--max-steps",
        type=whole_number,
        default=None,
        help="--search: steps per variant at most (default 8, MIN and MAX included)",
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
    sw.add_argument("--report-dir", default=None, help="where sweep.json / sweep.md and every step's report go")
    sw.add_argument("--quiet", action="store_true", help="do not print the Markdown table")
