"""`loadgen` command line: validate, run, sweep, demo, sim, report, trend, compare."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from loadgen.config.durations import parse_duration
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import (
    Scenario,
    check_environment,
    load_scenario,
    missing_secrets,
)
from loadgen.exit_codes import ExitCode
from loadgen.k8s.cli import add_k8s_parser, cmd_k8s
from loadgen.report.compare_cli import add_compare_parser, cmd_compare
from loadgen.report.report_cli import add_report_parser, cmd_report
from loadgen.report.serve import positive_seconds
from loadgen.report.trend import add_trend_parser, cmd_trend
from loadgen.sweep_cli import add_sweep_parser, cmd_sweep

DEMO_VARIANTS = ("baseline", "int8", "spec-decode")


def _cmd_validate(args: argparse.Namespace) -> int:
    try:
        sc = load_scenario(args.file)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return ExitCode.USAGE
    # Only a warning here: validate may run where the run's secrets are not (a laptop, CI before deploy).
    for issue in missing_secrets(sc):
        print(f"warning: {issue.render(args.file)}", file=sys.stderr)
    names = ", ".join(v.name for v in sc.variants)
    mixes = ", ".join(f"{m.name}×{m.weight:g}" for m in sc.traffic.mixes)
    print(
        f"{args.file}: OK — scenario {sc.name!r}: variants [{names}], mixes [{mixes}], "
        f"{sc.load.users} users for {sc.load.duration:g}s (warm-up {sc.load.warmup:g}s), {len(sc.slos)} SLOs"
    )
    return 0


def _run(scenario_path: Path, args: argparse.Namespace) -> int:
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
        # Variants named by a Kubernetes selector run against a copy with their Services' URLs filled in.
        scenario_path = resolve_scenario_file(scenario_path) or scenario_path
    except K8sError as e:
        print(f"loadgen: {e}", file=sys.stderr)
        return ExitCode.USAGE
    try:
        sc = load_scenario(scenario_path)
        check_environment(sc, str(scenario_path))
    except ConfigError as e:
        print(e, file=sys.stderr)
        return ExitCode.USAGE
    usage = _check_run_flags(args)
    if usage:
        print(f"loadgen: {usage}", file=sys.stderr)
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
        print(f"Reports: {report_dir / 'report.json'}  {md}")
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


def _cmd_run(args: argparse.Namespace) -> int:
    code = _run(Path(args.file), args)
    if args.serve_reports is None:
        return code
    from loadgen.report.serve import serve_reports

    try:
        report_dir = Path(args.report_dir or load_scenario(args.file).report_dir)
    except ConfigError:
        report_dir = Path(args.report_dir or "loadgen-report")
    report_dir.mkdir(parents=True, exist_ok=True)
    return serve_reports(report_dir, code, args.serve_reports, port=args.serve_reports_port)


def _cmd_demo(args: argparse.Namespace) -> int:
    from importlib.resources import files

    from loadgen.sim.launch import start_sim_process

    report_dir = Path(args.report_dir or "loadgen-report")
    report_dir.mkdir(parents=True, exist_ok=True)
    doc = yaml.safe_load(files("loadgen").joinpath("examples/demo.yaml").read_text(encoding="utf-8"))
    print(f"loadgen demo: simulator with variants {', '.join(DEMO_VARIANTS)}", flush=True)
    with start_sim_process(list(DEMO_VARIANTS), seed=0) as sim:
        for v in doc["variants"]:
            v["base_url"] = sim.base_url(v["name"])
        scenario_path = report_dir / "demo-scenario.yaml"
        scenario_path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        print(f"running {args.duration or doc['load']['duration']} of mixed chat/rag/code load …", flush=True)
        code = _run(scenario_path, args)
    # The demo shows a report; SLO verdicts are in it, but only a broken run (2, 3, 4, 128 + N) fails the command.
    return 0 if code in (ExitCode.OK, ExitCode.SLO_BREACHED) else code


def _cmd_sim(args: argparse.Namespace, rest: list[str]) -> int:
    from loadgen.sim.__main__ import main as sim_main

    return sim_main(rest)


def _workers(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0 (0 = one local process), got {text!r}")
    return n


def _cmd_locustfile(args: argparse.Namespace) -> int:
    from loadgen.locust_plugin.launcher import LOCUSTFILE

    print(LOCUSTFILE)
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="loadgen", description="Load generation for LLM inference deployments.")
    sub = p.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("validate", help="check a scenario file; errors name the field and line (exit 2)")
    v.add_argument("file")

    def run_flags(sp: argparse.ArgumentParser) -> None:
        sp.add_argument(
            "--workers",
            type=_workers,
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
        sp.add_argument(
            "--metrics-port", type=int, default=0, help="serve the master's Prometheus /metrics on this port"
        )
        sp.add_argument(
            "--metrics-linger", type=float, default=0.0, help="keep --metrics-port up N s after the final report"
        )
        sp.add_argument("--pushgateway", default="", help="push the run's final figures to this Pushgateway URL")

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
    add_sweep_parser(sub, _workers)
    d = sub.add_parser("demo", help="simulator with 3 variants + ~60 s of mixed load; prints the report")
    run_flags(d)
    sub.add_parser(
        "sim", help="serve the simulated OpenAI-compatible engine (see `loadgen sim --help`)", add_help=False
    )
    sub.add_parser("locustfile", help="print the path of loadgen's locustfile, for `locust -f`")
    add_report_parser(sub)
    add_trend_parser(sub)
    add_compare_parser(sub)
    add_k8s_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sim"]:
        return _cmd_sim(argparse.Namespace(), argv[1:])
    args = _parser().parse_args(argv)
    handlers = {
        "validate": _cmd_validate,
        "run": _cmd_run,
        "sweep": cmd_sweep,
        "demo": _cmd_demo,
        "report": cmd_report,
        "trend": cmd_trend,
        "compare": cmd_compare,
        "locustfile": _cmd_locustfile,
        "k8s": cmd_k8s,
    }
    return handlers[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
