"""Every process imports `loadgen` first, and `loadgen` runs several hundred of them in a run's life and the suite's:
the package and `loadgen.report` hand out their names on first use (PEP 562), and `loadgen CMD` imports the module
of CMD alone. Held here: the names resolve to the modules' own objects; a start imports what its job needs only
(the simulator no numpy, no pydantic; `loadgen run`'s parser no report builder); and the parser built for one
command parses, helps and refuses exactly as the whole one does."""

from __future__ import annotations

import argparse

import pytest

import loadgen
import loadgen.report
from loadgen.cli import _COMMANDS, _parser

from ..fresh_interpreter import run_fresh


@pytest.mark.parametrize("package", [loadgen, loadgen.report], ids=["loadgen", "loadgen.report"])
def test_every_exported_name_is_its_modules_own(package: object) -> None:
    names = package.__all__  # type: ignore[attr-defined]
    assert names and set(names) <= set(dir(package))
    for name in names:
        value = getattr(package, name)
        assert getattr(value, "__name__", name) == name or name.isupper(), name
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        package.nothing_here  # type: ignore[attr-defined]  # noqa: B018


def test_a_start_imports_what_its_job_needs() -> None:
    got = run_fresh(
        "import json, sys\n"
        "import loadgen.sim.server\n"
        "sim = sorted(m for m in ('numpy', 'pydantic', 'loadgen.config', 'loadgen.report.build') if m in sys.modules)\n"
        "from loadgen.cli import _parser\n"
        "_parser('run')\n"
        "heavy = ('loadgen.report.build', 'loadgen.cli.sweep', 'loadgen.cli.k8s')\n"
        "run = sorted(m for m in heavy if m in sys.modules)\n"
        "print(json.dumps([sim, run, 'loadgen.config' in sys.modules]))\n"
    )
    assert got == [[], [], True]


def _sub(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


@pytest.mark.parametrize("name", [c for c in _COMMANDS if c != "sim"])
def test_one_commands_parser_is_the_whole_parsers(name: str) -> None:
    alone, whole = _sub(_parser(name)).choices[name], _sub(_parser()).choices[name]
    assert alone.format_help() == whole.format_help()
    assert alone.format_usage() == whole.format_usage()


@pytest.mark.parametrize(
    "argv",
    [["run", "s.yaml", "--workers", "2"], ["run"], ["sweep", "s.yaml", "--rates", "x"], ["k8s"], ["compare", "a"]],
)
def test_one_commands_parser_parses_and_refuses_as_the_whole(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes = []
    for parser in (_parser(argv[0]), _parser()):
        try:
            outcomes.append(vars(parser.parse_args(argv)))
        except SystemExit as exc:
            outcomes.append({"exit": exc.code, "err": capsys.readouterr().err})
    assert outcomes[0] == outcomes[1]
