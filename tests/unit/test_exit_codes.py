"""loadgen/exit_codes.py is the one definition of what an exit status means, and loadgen/cli/crash.py what an
exception no command caught becomes: one line, a log holding the traceback, exit 4. The commands' processes are run
into each code by tests/integration/test_exit_codes.py and tests/k8s/test_exit_codes.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

import loadgen.cli.schema as schema_cmd
import loadgen.cli.validate as validate_cmd
from loadgen.cli import _parser, main
from loadgen.cli.crash import crash_line
from loadgen.exit_codes import BY_COMMAND, EVERY_COMMAND, GATES, SIGNAL_MEANING, ExitCode


def _commands() -> set[str]:
    """Every command the parser knows, `k8s discover` style for the subcommands' own."""
    root = _parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    out = set()
    for name, parser in sub.choices.items():
        inner = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        out |= {f"{name} {s}" for s in inner[0].choices} if inner else {name}
    return out


def test_every_code_has_a_meaning_and_every_command_its_codes() -> None:
    assert [int(c) for c in ExitCode] == [0, 1, 2, 3, 4]
    assert all(c.meaning.strip() and c.label.strip() for c in ExitCode)
    assert "signal N" in SIGNAL_MEANING
    assert set(EVERY_COMMAND) == {ExitCode.USAGE, ExitCode.RUN_FAILED}
    # Every command but the simulator (a test server) says what gives each code it can give; nothing is left over.
    assert set(BY_COMMAND) == _commands() - {"sim"}
    assert set(GATES) <= set(BY_COMMAND)
    for name in GATES:  # the gates give every code, each for a reason of their own
        assert set(BY_COMMAND[name]) == set(ExitCode), name
    # 3 is the load generator's own health, never the target's.
    assert all("target" not in text for by in BY_COMMAND.values() for c, text in by.items() if c == 3)


def test_the_help_lists_the_codes_from_the_definition(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for c in ExitCode:
        assert f"{int(c)} {' '.join(c.meaning.split())}" in out
    assert "docs/reference/exit-codes.md" in out


def test_an_uncaught_exception_is_one_line_a_named_log_and_exit_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(args: argparse.Namespace) -> int:
        raise NotADirectoryError(20, "Not a directory", str(tmp_path / "file" / "out"))

    monkeypatch.setattr(validate_cmd, "cmd_validate", broken)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
    assert main(["validate", "x.yaml"]) == ExitCode.RUN_FAILED
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert line.startswith("loadgen: validate failed: NotADirectoryError: [Errno 20] Not a directory: ")
    (log,) = tmp_path.glob("loadgen-crash-*.log")
    assert line.endswith(f"(traceback in {log})")
    text = log.read_text(encoding="utf-8")
    assert text.startswith("loadgen ") and "command: loadgen validate" in text
    assert "Traceback (most recent call last)" in text and "in broken" in text and "x.yaml" not in text


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(7)])
def test_ctrl_c_and_an_explicit_exit_keep_their_meaning(
    exc: BaseException, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    def handler(args: argparse.Namespace) -> int:
        raise exc

    monkeypatch.setattr(validate_cmd, "cmd_validate", handler)
    with pytest.raises(type(exc)):
        main(["validate", "x.yaml"])


def test_without_a_writable_temp_dir_the_traceback_goes_to_stderr(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The line still comes last, and still says 4; nothing is lost."""
    import tempfile

    def boom(args: argparse.Namespace) -> int:
        raise RuntimeError("boom\nsecond line")

    def no_temp(*_: object, **__: object) -> None:
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(schema_cmd, "cmd_schema", boom)
    monkeypatch.setattr(tempfile, "mkstemp", no_temp)
    assert main(["schema"]) == ExitCode.RUN_FAILED
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "in boom" in err
    assert err.strip().splitlines()[-1] == (
        "loadgen: schema failed: RuntimeError: boom second line (traceback above: no log file could be written)"
    )


def test_a_long_message_is_cut_on_its_line() -> None:
    line = crash_line("run", ValueError("x" * 1000), "/tmp/l.log")
    assert len(line) < 500 and line.endswith("… (traceback in /tmp/l.log)")


@pytest.mark.parametrize("command", GATES)
def test_each_gates_help_says_what_gives_each_of_its_codes(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([*command.split(), "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for code, text in BY_COMMAND[command].items():
        assert f"{int(code)} {' '.join(text.split())}" in out, (command, int(code))
