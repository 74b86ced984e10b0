"""The `loadgen` command line, one module per command: init, validate, run, demo, sweep, report, trend, compare,
schema, locustfile, sim, k8s. `main` parses and dispatches; each module adds its own parser and runs its command.
Whatever a command raises and does not catch exits 4 with one line (loadgen/cli/crash.py); the codes' meanings are
loadgen/exit_codes.py's."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version

from loadgen.cli.compare import add_compare_parser, cmd_compare
from loadgen.cli.crash import guarded
from loadgen.cli.demo import add_demo_parser, cmd_demo
from loadgen.cli.init import add_init_parser, cmd_init
from loadgen.cli.k8s import add_k8s_parser, cmd_k8s
from loadgen.cli.locustfile import add_locustfile_parser, cmd_locustfile
from loadgen.cli.report import add_report_parser, cmd_report
from loadgen.cli.run import add_run_parser, cmd_run, whole_number
from loadgen.cli.schema import add_schema_parser, cmd_schema
from loadgen.cli.sweep import add_sweep_parser, cmd_sweep
from loadgen.cli.trend import add_trend_parser, cmd_trend
from loadgen.cli.validate import add_validate_parser, cmd_validate

__all__ = ["main", "version_line"]

_HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "init": cmd_init,
    "validate": cmd_validate,
    "run": cmd_run,
    "sweep": cmd_sweep,
    "demo": cmd_demo,
    "report": cmd_report,
    "trend": cmd_trend,
    "compare": cmd_compare,
    "schema": cmd_schema,
    "locustfile": cmd_locustfile,
    "k8s": cmd_k8s,
}


_EPILOG = """\
first steps:
  loadgen demo                              the embedded simulator, three variants, a report
  loadgen sim --variant baseline:8000       a simulated server on :8000, if you have none (until Ctrl-C)
  loadgen init http://127.0.0.1:8000        a starter scenario for your server (asks it what it is)
  loadgen run scenario.yaml                 run it; the exit code is the verdict
  loadgen compare BASE.json NEW.json        the regression gate between two reports

exit codes (every command; what gives each, per command: docs/reference/exit-codes.md):
{codes}
"""


def version_line() -> str:
    """`loadgen X.Y.Z (Python A.B.C, locust L)`: what a bug report needs to name."""
    try:
        own = version("llm-loadgen")
    except PackageNotFoundError:  # run from a source tree that was never installed
        own = "unknown (not installed)"
    try:
        locust = version("locust")
    except PackageNotFoundError:
        locust = "not installed"
    py = ".".join(map(str, sys.version_info[:3]))
    return f"loadgen {own} (Python {py}, locust {locust})"


def _epilog() -> str:
    """The first steps, and the exit codes from their one definition (loadgen/exit_codes.py), wrapped."""
    from textwrap import wrap

    from loadgen.exit_codes import SIGNAL_MEANING, ExitCode

    rows = [(str(int(c)), c.meaning) for c in ExitCode] + [("128+N", SIGNAL_MEANING)]
    lines = [
        line
        for code, text in rows
        for line in wrap(text, 110, initial_indent=f"  {code:<6}", subsequent_indent=" " * 8)
    ]
    return _EPILOG.format(codes="\n".join(lines))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadgen",
        description="Load generation for LLM inference deployments.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_epilog(),
    )
    p.add_argument("--version", action="version", version=version_line())
    sub = p.add_subparsers(dest="cmd", required=True)
    add_init_parser(sub)
    add_validate_parser(sub)
    add_run_parser(sub)
    add_sweep_parser(sub, whole_number)
    add_demo_parser(sub)
    sub.add_parser(
        "sim", help="serve the simulated OpenAI-compatible engine (see `loadgen sim --help`)", add_help=False
    )
    add_locustfile_parser(sub)
    add_schema_parser(sub)
    add_report_parser(sub)
    add_trend_parser(sub)
    add_compare_parser(sub)
    add_k8s_parser(sub)
    _exit_codes_in_help(sub)
    return p


def _exit_codes_in_help(sub: argparse._SubParsersAction[argparse.ArgumentParser], prefix: str = "") -> None:
    """Each command's `--help` ends with what gives each exit code in it (loadgen/exit_codes.py's BY_COMMAND)."""
    from loadgen.exit_codes import BY_COMMAND, codes_of

    for name, parser in sub.choices.items():
        inner = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if inner:
            _exit_codes_in_help(inner[0], f"{prefix}{name} ")
        elif f"{prefix}{name}" in BY_COMMAND and parser.epilog is None:
            parser.epilog = codes_of(f"{prefix}{name}")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["sim"]:  # the simulator parses its own flags
        from loadgen.sim.__main__ import main as sim_main

        return guarded("sim", lambda: sim_main(argv[1:]), version_line)
    args = _parser().parse_args(argv)  # a usage error exits 2 here (SystemExit), before any command runs
    command = args.cmd if args.cmd != "k8s" else f"k8s {args.k8s_cmd}"
    return guarded(command, lambda: _HANDLERS[args.cmd](args), version_line)
