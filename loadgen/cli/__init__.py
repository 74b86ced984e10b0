"""The `loadgen` command line, one module per command: init, validate, run, demo, sweep, report, trend, compare,
schema, locustfile, sim, k8s. `main` parses and dispatches; each module adds its own parser and runs its command.
Whatever a command raises and does not catch exits 4 with one line (loadgen/cli/crash.py); the codes' meanings are
loadgen/exit_codes.py's."""

from __future__ import annotations

import argparse
import sys
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from loadgen.cli.crash import guarded

__all__ = ["main", "version_line"]

# The commands in the order `loadgen --help` lists them, each `loadgen/cli/<name>.py` with its `add_<name>_parser`
# and `cmd_<name>` (`sim` excepted: the simulator parses its own flags). A command's module is imported when it is
# the command asked for (or for `loadgen --help`): the modules of all of them cost every start ~0.2 s.
_COMMANDS = (
    "init",
    "validate",
    "run",
    "sweep",
    "demo",
    "sim",
    "locustfile",
    "schema",
    "report",
    "trend",
    "compare",
    "k8s",
)
_SIM_HELP = "serve the simulated OpenAI-compatible engine (see `loadgen sim --help`)"


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


def _module(name: str) -> Any:
    """The command's module, `loadgen/cli/<name>.py`, imported now."""
    return import_module(f"loadgen.cli.{name}")


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or only the one of ``only``: its usage, help and errors are the same either way."""
    p = argparse.ArgumentParser(
        prog="loadgen",
        description="Load generation for LLM inference deployments.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_epilog(),
    )
    p.add_argument("--version", action="version", version=version_line())
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in _COMMANDS if only is None else (only,):
        if name == "sim":
            sub.add_parser("sim", help=_SIM_HELP, add_help=False)
        elif name == "sweep":
            _module("sweep").add_sweep_parser(sub, _module("run").whole_number)
        else:
            getattr(_module(name), f"add_{name}_parser")(sub)
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
    only = argv[0] if argv[:1] and argv[0] in _COMMANDS else None
    args = _parser(only).parse_args(argv)  # a usage error exits 2 here (SystemExit), before any command runs
    command = args.cmd if args.cmd != "k8s" else f"k8s {args.k8s_cmd}"
    return guarded(command, lambda: getattr(_module(args.cmd), f"cmd_{args.cmd}")(args), version_line)
