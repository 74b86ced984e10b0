"""`loadgen run FILE`: a scenario headless — a Locust master and N workers on this machine — then its reports."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from loadgen.cli.scenario_args import add_set_argument, read_with_overrides, write_as_run
from loadgen.config.durations import parse_duration
from loadgen.config.errors import ConfigError
from loadgen.config.overrides import parse_override
from loadgen.config.scenario import Scenario, check_environment, read_document
from loadgen.exit_codes import ExitCode
from loadgen.preflight import checked
from loadgen.report.serve import positive_seconds

__all__ = ["add_run_parser", "cmd_run", "run_flags", "run_scenario_file", "whole_number"]


def whole_number(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0 (0 = one local process), got {text!r}")
    return n


def run_flags(sp: argparse.ArgumentParser) -> None:
    sp.add_argument(
        "--workers",
        type=whole_number,
        default=None,
        help="worker processes besides the master (0 = one local process; "
        "default: one per core, keeping one core for the master)",
    )
    sp.add_argument("--report-dir", default=None, help="where report.json / report.md / report.html go")
    sp.add_argument("--duration", default=None, help="override load.duration (e.g. 30s)")
    sp.add_argument("--raw-records", default=None, help="also write every raw request record as JSONL here")
    sp.add_argument("--quiet", action="store_true", help="do not print the Markdown report (nor the status line)")
    sp.add_argument(
        "--no-progress", action="store_true", help="no status line on stderr during the run (every 5 s in logs)"
    )
    sp.add_argument("--metrics-port", type=int, default=0, help="serve the master's Prometheus /metrics on this port")
    sp.add_argument(
        "--metrics-linger", type=float, default=0.0, help="keep --metrics-port up N s after the final report"
    )
    sp.add_argument("--pushgateway", default="", help="push the run's final figures to this Pushgateway URL")
    add_set_argument(sp)


def add_run_parser(sub: Any) -> None:
    r = sub.add_parser("run", help="run a scenario headless: Locust master + N workers on loopback")
    r.add_argument("file")
    run_flags(r)
    r.add_argument(
        "--serve-reports",
        type=positive_seconds,
        default=None,
        metavar="DURATION",
        help="after the run, serve the report dir read-only over HTTP for up to DURATION (or until GET /done), "
        "then exit with the run's code: how a Kubernetes Job's reports are fetched",
    )
    r.add_argument("--serve-reports-port", type=int, default=8089, help="port for --serve-reports (default 8089)")
    r.add_argument(
        "--serve-reports-host",
        default="127.0.0.1",
        help="interface for --serve-reports (default 127.0.0.1: this machine only; 0.0.0.0: every interface)",
    )


def run_scenario_file(scenario_path: Path, args: argparse.Namespace) -> int:
    from loadgen.k8s.api import K8sError
    from loadgen.k8s.resolve import resolve_scenario_file
    from loadgen.locust_plugin.launcher import (
        RunOptions,
        default_workers,
        refused_before_load,
        run_scenario,
        set_aside_reports,
    )

    try:
        doc = read_with_overrides(scenario_path, args)
        sc = doc.validate()  # the model's rules first: a bad --set is refused before anything is written
        if doc.overrides:
            scenario_path = write_as_run(doc, Path(args.report_dir or sc.report_dir))
    except ConfigError as e:
        print(e, file=sys.stderr)
        return ExitCode.USAGE
    try:
        # Variants named by a Kubernetes selector run against a copy with their Services' URLs filled in.
        resolved = resolve_scenario_file(scenario_path)
    except K8sError as e:
        print(f"loadgen: {e}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        if resolved is not None:
            scenario_path, doc = resolved, read_document(resolved)
        sc = checked(doc)  # datasets, tokenizer, the cluster Prometheus: loadgen/preflight.py
        check_environment(sc, doc.source)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return ExitCode.USAGE
    usage = _check_run_flags(args)
    if usage:
        print(f"loadgen: {usage}", file=sys.stderr)
        return ExitCode.USAGE
    if args.duration:
        try:  # the Locust processes apply it (--loadgen-duration); its rules (warm-up < duration) are checked here
            doc.with_overrides([parse_override(f"load.duration={args.duration}", "--duration")]).validate()
        except ConfigError as e:
            print(e, file=sys.stderr)
            return ExitCode.USAGE
    refused = refused_before_load(sc, str(scenario_path))
    if refused is not None:
        return refused
    report_dir = Path(args.report_dir or sc.report_dir)
    # A report left by an earlier run must never pass for this one's.
    workers = args.workers
    if workers is None:
        workers, why = default_workers()
        print(f"loadgen: {why}; --workers N to change", file=sys.stderr, flush=True)
    short = _senders_short(sc, workers)
    if short:
        print(f"loadgen: {short}", file=sys.stderr)
        return ExitCode.USAGE
    set_aside_reports(report_dir)
    opts = RunOptions(
        scenario_path=scenario_path,
        workers=workers,
        report_dir=report_dir,
        duration=args.duration,
        raw_records=Path(args.raw_records) if args.raw_records else None,
        progress=not (args.quiet or args.no_progress),
        metrics_port=getattr(args, "metrics_port", 0) or 0,
        metrics_linger=getattr(args, "metrics_linger", 0.0) or 0.0,
        pushgateway=getattr(args, "pushgateway", "") or "",
    )
    if sc.load.sequential and len(sc.variants) > 1:
        from loadgen.locust_plugin.sequential import run_sequential

        code = run_sequential(sc, yaml.safe_load(scenario_path.read_text(encoding="utf-8")), opts, report_dir)
    else:
        code = run_scenario(sc, opts)
    md = report_dir / "report.md"
    if not md.exists():
        print(
            f"loadgen: the run wrote no report (exit {code}); see the logs in {report_dir}/locust-*.log",
            file=sys.stderr,
        )
        # (run_scenario settled the code: 2 for a configuration refused before load, else the run failed)
        return code or ExitCode.RUN_FAILED
    if not args.quiet:
        print(md.read_text(encoding="utf-8"))
        html = report_dir / "report.html"
        print(f"Reports: {report_dir / 'report.json'}  {md}" + (f"  {html}" if html.exists() else ""))
        if html.exists():
            print(f"Open in a browser: {html.resolve().as_uri()}")
    return code


def _senders_short(sc: Scenario, workers: int) -> str | None:
    """Open loop: each worker splits its own users over the variants, so a worker with fewer users than variants
    has no sender for some variant's share of the schedule (every such arrival would end unsent)."""
    processes = max(workers, 1)
    variants = 1 if sc.load.sequential else len(sc.variants)
    if sc.load.arrival is None or sc.load.users >= variants * processes:
        return None
    return (
        f"load.users ({sc.load.users}) is below variants × workers ({variants} × {processes}): in open loop each "
        "worker splits its users over the variants, so some worker would have no sender for a variant's share of "
        f"the schedule; raise load.users to at least {variants * processes} or use fewer --workers"
    )


def _check_run_flags(args: argparse.Namespace) -> str | None:
    """A bad flag, said before any process starts: inside Locust it would surface only in a log (or hang it)."""
    if args.duration is not None:
        try:
            if parse_duration(args.duration) <= 0:
                return f"--duration: must be greater than 0, got {args.duration!r}"
        except ValueError as e:
            return f"--duration: {e}"
    if args.raw_records:
        try:
            Path(args.raw_records).mkdir(parents=True, exist_ok=True)
        except OSError as e:
            return f"--raw-records {args.raw_records}: cannot create the directory ({e.strerror or e})"
    return None


def cmd_run(args: argparse.Namespace) -> int:
    code = run_scenario_file(Path(args.file), args)
    if args.serve_reports is None:
        return code
    from loadgen.report.serve import serve_reports

    try:
        report_dir = Path(args.report_dir or read_with_overrides(args.file, args).validate().report_dir)
    except ConfigError:
        report_dir = Path(args.report_dir or "loadgen-report")
    report_dir.mkdir(parents=True, exist_ok=True)
    return serve_reports(
        report_dir, code, args.serve_reports, port=args.serve_reports_port, host=args.serve_reports_host
    )
