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


def test_run_against_unreachable_target_exits_1_before_starting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dead target is a breach (1), not an untrustworthy load generator (3): nothing is run."""
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert main(["run", _write(tmp_path, GOOD.replace("PORT", str(port))), "--workers", "0"]) == 1
    err = capsys.readouterr().err
    assert "variant 'a'" in err and f"127.0.0.1:{port}" in err


def test_report_command_renders_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: cannot read it" in capsys.readouterr().err


# --- configuration mistakes fail before load ----------------------------------------------------------------

KEYED = GOOD.replace("model: m}", "model: m, api_key_env: LG_TEST_KEY}")


def _fake_run(monkeypatch: pytest.MonkeyPatch, write: str | None = None) -> list[object]:
    """Replace the Locust run (and the TCP preflight) by a stub that records its options and optionally writes a
    report.md, so the CLI's own handling is what is tested."""
    import loadgen.locust_plugin.launcher as runner

    calls: list[object] = []

    def run_scenario(sc: object, opts: runner.RunOptions) -> int:
        calls.append(opts)
        if write is not None:
            assert opts.report_dir is not None
            opts.report_dir.mkdir(parents=True, exist_ok=True)
            (opts.report_dir / "report.md").write_text(write, encoding="utf-8")
        return 0

    monkeypatch.setattr(runner, "run_scenario", run_scenario)
    monkeypatch.setattr(runner, "unreachable_variants", lambda sc: [])
    return calls


@pytest.mark.parametrize("value", [None, "", "  "])
def test_run_with_unset_or_empty_api_key_env_exits_2_before_any_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("LG_TEST_KEY", raising=False)
    else:
        monkeypatch.setenv("LG_TEST_KEY", value)
    calls = _fake_run(monkeypatch)
    assert main(["run", _write(tmp_path, KEYED.replace("PORT", "9")), "--workers", "0"]) == 2
    err = capsys.readouterr().err
    assert "variants[0].api_key_env" in err and "LG_TEST_KEY" in err
    assert ("is empty" if value is not None else "is not set") in err
    assert calls == []


def test_run_with_api_key_set_goes_ahead_and_never_prints_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LG_TEST_KEY", "sk-secret-value")
    calls = _fake_run(monkeypatch, write="# fresh report\n")
    args = ["run", _write(tmp_path, KEYED.replace("PORT", "9")), "--workers", "0", "--report-dir", str(tmp_path)]
    assert main(args) == 0
    out, err = capsys.readouterr()
    assert len(calls) == 1 and "# fresh report" in out
    assert "sk-secret-value" not in out + err


def test_validate_only_warns_about_an_unset_api_key_env(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LG_TEST_KEY", raising=False)
    assert main(["validate", _write(tmp_path, KEYED.replace("PORT", "9"))]) == 0
    out, err = capsys.readouterr()
    assert "OK" in out
    assert err.startswith("warning: ") and "variants[0].api_key_env" in err and "LG_TEST_KEY is not set" in err


def test_run_never_prints_a_report_left_by_an_earlier_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    report_dir = tmp_path / "rep"
    report_dir.mkdir()
    (report_dir / "report.md").write_text("# OLD REPORT\n", encoding="utf-8")
    (report_dir / "report.json").write_text('{"old": true}', encoding="utf-8")
    _fake_run(monkeypatch)  # writes nothing, like a master that died before its report
    args = ["run", _write(tmp_path, GOOD.replace("PORT", "9")), "--workers", "0", "--report-dir", str(report_dir)]
    assert main(args) == 4  # the run failed: no verdict (never 1, "SLO breached", nor 3)
    out, err = capsys.readouterr()
    assert "OLD REPORT" not in out and "wrote no report" in err
    assert not (report_dir / "report.md").exists() and not (report_dir / "report.json").exists()
    # Set aside, not destroyed.
    assert (report_dir / "report.previous.md").read_text(encoding="utf-8") == "# OLD REPORT\n"
    assert (report_dir / "report.previous.json").read_text(encoding="utf-8") == '{"old": true}'


def test_run_prints_the_report_this_run_wrote(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    report_dir = tmp_path / "rep"
    report_dir.mkdir()
    (report_dir / "report.md").write_text("# OLD REPORT\n", encoding="utf-8")
    _fake_run(monkeypatch, write="# NEW REPORT\n")
    args = ["run", _write(tmp_path, GOOD.replace("PORT", "9")), "--workers", "0", "--report-dir", str(report_dir)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "# NEW REPORT" in out and "OLD REPORT" not in out


@pytest.mark.parametrize(
    ("cores", "workers", "message"),
    [
        (2, 1, "loadgen: 1 worker process (2 cores, one kept for the master); --workers N to change"),
        (8, 7, "loadgen: 7 worker processes (8 cores, one kept for the master); --workers N to change"),
        (1, 1, "loadgen: 1 worker process (1 core, shared with the master); --workers N to change"),
    ],
)
def test_workers_default_to_one_per_core_but_the_masters_and_say_so(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    cores: int,
    workers: int,
    message: str,
) -> None:
    import loadgen.locust_plugin.launcher as runner

    monkeypatch.setattr(runner.os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    calls = _fake_run(monkeypatch, write="# r\n")
    assert main(["run", _write(tmp_path, GOOD.replace("PORT", "9")), "--report-dir", str(tmp_path / "r")]) == 0
    assert [c.workers for c in calls] == [workers]  # type: ignore[attr-defined]
    assert message in capsys.readouterr().err.splitlines()


def test_explicit_workers_are_kept_and_not_announced(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _fake_run(monkeypatch, write="# r\n")
    args = ["run", _write(tmp_path, GOOD.replace("PORT", "9")), "--workers", "0", "--report-dir", str(tmp_path)]
    assert main(args) == 0
    assert [c.workers for c in calls] == [0]  # type: ignore[attr-defined]
    assert "worker process" not in capsys.readouterr().err


@pytest.mark.parametrize("value", ["-1", "two"])
def test_bad_workers_value_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", _write(tmp_path, GOOD.replace("PORT", "9")), "--workers", value])
    assert info.value.code == 2
    assert "--workers" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--duration", "soon"], "--duration: invalid duration 'soon'"),
        (["--duration", "0"], "--duration: must be greater than 0"),
        (["--raw-records", "FILE/raw"], "--raw-records"),
    ],
)
def test_bad_run_flags_exit_2_before_any_process_starts(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flags: list[str],
    fragment: str,
) -> None:
    (tmp_path / "FILE").write_text("not a directory", encoding="utf-8")
    flags = [f.replace("FILE", str(tmp_path / "FILE")) for f in flags]
    calls = _fake_run(monkeypatch)
    assert main(["run", _write(tmp_path, GOOD.replace("PORT", "9")), "--workers", "0", *flags]) == 2
    assert fragment in capsys.readouterr().err
    assert calls == []


def test_locustfile_prints_the_packaged_locustfile(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["locustfile"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.is_file() and path.name == "locustfile.py"
    # The repo's locustfiles/llm.py is that file re-exported, not a copy of it.
    repo_file = Path(__file__).resolve().parents[2] / "locustfiles" / "llm.py"
    assert "from loadgen.locust_plugin.locustfile import StreamingLLMUser" in repo_file.read_text()


def test_open_loop_with_fewer_users_than_variants_times_workers_exits_2_before_any_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    two = GOOD.replace("PORT", "9").replace(
        "model: m}\n", 'model: m}\n  - {name: b, base_url: "http://127.0.0.1:9", model: m}\n'
    )
    scenario = two.replace(
        "load: {users: 2, duration: 5s}", "load: {users: 3, duration: 5s, arrival: {kind: poisson, rate: 5}}"
    )
    calls = _fake_run(monkeypatch, write="# r\n")
    assert main(["run", _write(tmp_path, scenario), "--workers", "2", "--report-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "load.users (3) is below variants × workers (2 × 2)" in err and "--workers" in err
    assert calls == []
    # Enough senders for every worker's share of every variant: it runs.
    assert main(["run", _write(tmp_path, scenario), "--workers", "1", "--report-dir", str(tmp_path)]) == 0
    assert len(calls) == 1
