from __future__ import annotations

import socket
from pathlib import Path

import pytest

from loadgen.cli import main

GOOD = """
name: t
variants:
  - {name: a, base_url: "http://127.0.0.1:PORT", model: m}
load: {users: 2, duration: 5s}
"""


def _write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "s.yaml"
    p.write_text(text, encoding="utf-8")
    return str(p)


def test_validate_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", _write(tmp_path, GOOD.replace("PORT", "9"))]) == 0
    assert "OK" in capsys.readouterr().out


def test_validate_names_field_and_line_and_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD.replace("PORT", "9").replace("users: 2", "users: lots")
    assert main(["validate", _write(tmp_path, text)]) == 2
    err = capsys.readouterr().err
    assert "load.users" in err and "s.yaml:5" in err


def test_unknown_dialect_and_mix_list_the_known_ones(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = GOOD.replace("PORT", "9").replace("model: m}", "model: m, dialect: tgi2}")
    text += "traffic:\n  mixes: [{name: chitchat, weight: 1}]\n"
    assert main(["validate", _write(tmp_path, text)]) == 2
    err = capsys.readouterr().err
    assert "variants[0].dialect" in err and "openai-chat" in err
    assert "traffic.mixes[0].name" in err and "'chat'" in err and "'rag'" in err


def test_run_against_unreachable_target_exits_3_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["run", _write(tmp_path, GOOD.replace("PORT", str(port))), "--workers", "0"]) == 3
    err = capsys.readouterr().err
    assert "variant 'a'" in err and f"127.0.0.1:{port}" in err


def test_report_command_renders_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "cannot read report" in capsys.readouterr().err
