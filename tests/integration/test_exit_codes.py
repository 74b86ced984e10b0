"""Each gate command run as a process into each code it can give (loadgen/exit_codes.py's BY_COMMAND): `run` and
`sweep` against the simulator, `report` and `compare` on reports built here from known records. `k8s run`:
tests/k8s/test_exit_codes.py. What the process exits is the point, so each case is a child process.

The cases a user meets first: a dead target stopped by `stop_when` exits 1 (the target breached; the load generator
is fine), and an exception in `loadgen` itself — a report directory under a regular file — exits 4 with one line on
stderr naming a log that holds the traceback, never a traceback that exits 1 ("an SLO breached").
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from array import array
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from loadgen.config.scenario import parse_scenario
from loadgen.exit_codes import BY_COMMAND, ExitCode
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import RequestRecord
from loadgen.report import build_report
from loadgen.report.failed_run import mark_failed
from loadgen.sim.launch import start_sim_process

from .harness import read_report, write_scenario

ROOT = Path(__file__).resolve().parents[2]
# Loose enough that the machine's load never decides a case that is not about the load generator's trust.
_TRUSTED = {"loop_lag_p99_ms": 500, "cpu_percent_p90": 100, "schedule_slip_p99_ms": 500}
_DISTRUSTED = {"loop_lag_p99_ms": 1e-9, "cpu_percent_p90": 1e-9, "schedule_slip_p99_ms": 1e-9}
_LOOSE = [{"metric": "e2e", "stat": "p99", "max_ms": 60_000}, {"metric": "success_rate", "min_percent": 50}]


def _loadgen(*args: str, tmp: Path, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """`loadgen ARGS` as a child process; its crash logs go to `tmp` ($TMPDIR)."""
    return subprocess.run(
        [sys.executable, "-m", "loadgen.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)},
    )


def _said(proc: subprocess.CompletedProcess[str]) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


def _one_crash_line(proc: subprocess.CompletedProcess[str], tmp: Path, command: str, exc: str) -> None:
    """Exit 4, no traceback on stderr, its last line naming the exception and the log that holds the traceback."""
    assert proc.returncode == ExitCode.RUN_FAILED, _said(proc)
    assert "Traceback" not in proc.stderr, _said(proc)
    line = proc.stderr.strip().splitlines()[-1]
    (log,) = tmp.glob("loadgen-crash-*.log")
    assert line.startswith(f"loadgen: {command} failed: {exc}: ") and line.endswith(f"(traceback in {log})"), line
    text = log.read_text(encoding="utf-8")
    assert f"command: loadgen {command}" in text and "Traceback (most recent call last)" in text and exc in text


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    with start_sim_process(["a=int8"]) as s:
        yield s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _DiesAfterPreflight:
    """A target that answers the one TCP connect `loadgen run` makes before load, then is gone: every request the
    run sends is refused."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._once, daemon=True)
        self.thread.start()

    def _once(self) -> None:
        conn, _ = self.sock.accept()
        conn.close()
        self.sock.close()


# --- loadgen run -------------------------------------------------------------------------------------------------


def _run_met(sim: Any, tmp: Path) -> subprocess.CompletedProcess[str]:
    scenario = write_scenario(
        tmp / "s.yaml", {"a": sim.base_url("a")}, load={"users": 2, "duration": "2s"}, slos=_LOOSE, run_trust=_TRUSTED
    )
    proc = _loadgen("run", str(scenario), "--quiet", "--workers", "0", tmp=tmp)
    assert read_report(tmp / "report")["exit_code"] == proc.returncode
    return proc


def _run_dead_target_stopped(sim: Any, tmp: Path) -> subprocess.CompletedProcess[str]:
    target = _DiesAfterPreflight()
    scenario = write_scenario(
        tmp / "s.yaml",
        {"dead": f"http://127.0.0.1:{target.port}"},
        load={"users": 2, "duration": "60s"},
        stop_when={"unreachable_for": "1s"},
        run_trust=_TRUSTED,
    )
    proc = _loadgen("run", str(scenario), "--quiet", "--workers", "0", tmp=tmp)
    report = read_report(tmp / "report")
    stop = report["run"]["stopped_early"]
    assert (stop["rule"], stop["verdict"]) == ("unreachable_for", "target_unreachable"), stop
    assert stop["after_s"] < 30 and report["run"]["trustworthy"] and report["exit_code"] == proc.returncode
    assert report["run"]["target_breaches"] == [
        "variant 'dead': no request succeeded: the target is unreachable or failing every one"
    ]
    return proc


def _run_refused(sim: Any, tmp: Path) -> subprocess.CompletedProcess[str]:
    scenario = write_scenario(tmp / "s.yaml", {"a": sim.base_url("a")}, load={"users": "lots"})
    proc = _loadgen("run", str(scenario), "--quiet", "--workers", "0", tmp=tmp)
    assert "load.users" in proc.stderr and not (tmp / "report").exists()
    return proc


def _run_distrusted(sim: Any, tmp: Path) -> subprocess.CompletedProcess[str]:
    scenario = write_scenario(
        tmp / "s.yaml", {"a": sim.base_url("a")}, load={"users": 2, "duration": "2s"}, slos=_LOOSE,
        run_trust=_DISTRUSTED,
    )  # fmt: skip
    proc = _loadgen("run", str(scenario), "--quiet", "--workers", "0", tmp=tmp)
    report = read_report(tmp / "report")
    assert report["run"]["untrustworthy_reasons"] and "target_breaches" not in report["run"]
    return proc


def _run_unwritable_report_dir(sim: Any, tmp: Path) -> subprocess.CompletedProcess[str]:
    (tmp / "a-file").write_text("not a folder\n", encoding="utf-8")
    scenario = write_scenario(
        tmp / "s.yaml", {"a": sim.base_url("a")}, load={"users": 2, "duration": "2s"}, slos=_LOOSE,
        report_dir=str(tmp / "a-file" / "report"),
    )  # fmt: skip
    proc = _loadgen("run", str(scenario), "--quiet", "--workers", "0", tmp=tmp)
    _one_crash_line(proc, tmp, "run", "NotADirectoryError")
    return proc


RUN: dict[str, tuple[int, Callable[[Any, Path], subprocess.CompletedProcess[str]]]] = {
    "every SLO met": (0, _run_met),
    "a dead target stopped by stop_when": (1, _run_dead_target_stopped),
    "a scenario refused before load": (2, _run_refused),
    "the load generator distrusted": (3, _run_distrusted),
    "a report directory under a regular file": (4, _run_unwritable_report_dir),
}


@pytest.mark.parametrize("case", list(RUN))
def test_run(case: str, sim: Any, tmp_path: Path) -> None:
    code, make = RUN[case]
    proc = make(sim, tmp_path)
    assert proc.returncode == code, _said(proc)


# --- reports built from known records: loadgen report, loadgen compare -----------------------------------------

_SCENARIO = "seed: 5\nvariants:\n  - {name: a, base_url: 'http://127.0.0.1:1', model: m}\n"


def _built(slow: float = 1.0, slos: str = "[]", run: dict[str, Any] | None = None) -> dict[str, Any]:
    """600 requests over 30 s, lognormal TTFT and gaps (x `slow`)."""
    g = np.random.default_rng(1)
    agg = Aggregate()
    for i in range(600):
        ttft, gap = g.lognormal(-3, 0.4) * slow, g.lognormal(-4, 0.3) * slow
        times = array("d", [100.0 + ttft + gap * k for k in range(10)])
        rec = RequestRecord(f"r1-w0-1-a-3-{i}", "a", "chat", sent=100.0, chunk_times=times)
        rec.chunk_tokens = array("l", [1] * 10)
        rec.done = times[-1]
        rec.output_tokens = 10
        agg.add(rec, 1_000_000.0 + 30.0 * i / 600)
    return build_report(parse_scenario(_SCENARIO + f"slos: {slos}\n"), agg, 30.0, dict(run or {}))


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("reports")
    docs = {
        "met": _built(),
        "breached": _built(slos="[{metric: ttft, stat: p50, max_ms: 1}]"),
        "slower": _built(slow=1.5),
        "distrusted": _built(run={"untrustworthy_reasons": ["worker w0: event-loop lag p99 40.0 ms > 20 ms"]}),
        "failed": mark_failed(_built(), "the master exited 1 after writing a report that says 0: it crashed"),
    }
    assert [d["exit_code"] for d in docs.values()] == [0, 1, 0, 3, 4]
    paths = {name: out / f"{name}.json" for name in docs}
    for name, doc in docs.items():
        paths[name].write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    whole = paths["met"].read_bytes()
    paths["truncated"] = out / "truncated.json"
    paths["truncated"].write_bytes(whole[: len(whole) // 2])  # a disk that filled up mid-write
    paths["scenario"] = out / "scenario.yaml"
    paths["scenario"].write_text(_SCENARIO, encoding="utf-8")
    paths["missing"] = out / "missing.json"
    return paths


REPORT = {
    "a report whose SLOs were met": (0, "met"),
    "a report of a breach": (1, "breached"),
    "a scenario given for a report": (2, "scenario"),
    "a report of a distrusted load generator": (3, "distrusted"),
    "a report of a failed run": (4, "failed"),
    "a truncated report": (4, "truncated"),
}


@pytest.mark.parametrize("case", list(REPORT))
def test_report(case: str, reports: dict[str, Path], tmp_path: Path) -> None:
    code, name = REPORT[case]
    proc = _loadgen("report", str(reports[name]), "--format", "md", tmp=tmp_path)
    assert proc.returncode == code, _said(proc)
    if code in (0, 1, 3) or name == "failed":
        assert proc.stdout.startswith("# loadgen report")
    else:
        assert str(reports[name]) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


COMPARE = {
    "no regression": (0, "met", "met"),
    "a slower NEW": (1, "met", "slower"),
    "a NEW that does not exist": (2, "met", "missing"),
    "a scenario given as NEW": (2, "met", "scenario"),
    "a distrusted NEW": (3, "met", "distrusted"),
    "a failed BASE": (4, "failed", "met"),
    "a truncated NEW": (4, "met", "truncated"),
}


@pytest.mark.parametrize("case", list(COMPARE))
def test_compare(case: str, reports: dict[str, Path], tmp_path: Path) -> None:
    code, base, new = COMPARE[case]
    proc = _loadgen("compare", str(reports[base]), str(reports[new]), "--resamples", "200", tmp=tmp_path)
    assert proc.returncode == code, _said(proc)
    if code in (0, 1, 3, 4) and new != "truncated":
        assert f"exit code {code}" in proc.stdout
    else:
        assert str(reports[new]) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# --- loadgen sweep -----------------------------------------------------------------------------------------------


def _sweep(scenario: Path, tmp: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return _loadgen("sweep", str(scenario), "--quiet", "--workers", "0", *flags, tmp=tmp)


def _sweep_knee(sim: Any, tmp: Path) -> subprocess.CompletedProcess[str]:
    scenario = write_scenario(tmp / "s.yaml", {"a": sim.base_url("a")}, load={"users": 4}, slos=_LOOSE,
                              run_trust=_TRUSTED)  # fmt: skip
    proc = _sweep(scenario, tmp, "--rates", "2", "--step-duration", "2s", "--report-dir", str(tmp / "out"))
    assert orjson.loads((tmp / "out" / "sweep.json").read_bytes())["variants"][0]["knee_rate_per_s"] == 2
    return proc


def _sweep_unreachable(sim: Any, tmp: Path) -> subprocess.CompletedProcess[str]:
    scenario = write_scenario(tmp / "s.yaml", {"a": f"http://127.0.0.1:{_free_port()}"}, load={"users": 4})
    proc = _sweep(scenario, tmp, "--rates", "2", "--step-duration", "2s", "--report-dir", str(tmp / "out"))
    assert "target unreachable, nothing was run" in proc.stderr
    return proc


def _sweep_bad_flag(sim: Any, tmp: Path) -> subprocess.CompletedProcess[str]:
    scenario = write_scenario(tmp / "s.yaml", {"a": sim.base_url("a")}, load={"users": 4})
    proc = _sweep(scenario, tmp, "--rates", "2", "--max-steps", "3")
    assert "--max-steps" in proc.stderr
    return proc


def _sweep_distrusted(sim: Any, tmp: Path) -> subprocess.CompletedProcess[str]:
    scenario = write_scenario(tmp / "s.yaml", {"a": sim.base_url("a")}, load={"users": 4}, slos=_LOOSE,
                              run_trust=_DISTRUSTED)  # fmt: skip
    return _sweep(scenario, tmp, "--rates", "2", "--step-duration", "2s", "--report-dir", str(tmp / "out"))


def _sweep_unwritable(sim: Any, tmp: Path) -> subprocess.CompletedProcess[str]:
    (tmp / "a-file").write_text("not a folder\n", encoding="utf-8")
    scenario = write_scenario(tmp / "s.yaml", {"a": sim.base_url("a")}, load={"users": 4})
    proc = _sweep(scenario, tmp, "--rates", "2", "--report-dir", str(tmp / "a-file" / "out"))
    _one_crash_line(proc, tmp, "sweep", "NotADirectoryError")
    return proc


SWEEP: dict[str, tuple[int, Callable[[Any, Path], subprocess.CompletedProcess[str]]]] = {
    "a knee": (0, _sweep_knee),
    "a target unreachable before load": (1, _sweep_unreachable),
    "a flag of another plan": (2, _sweep_bad_flag),
    "a distrusted step": (3, _sweep_distrusted),
    "a report directory under a regular file": (4, _sweep_unwritable),
}


@pytest.mark.parametrize("case", list(SWEEP))
def test_sweep(case: str, sim: Any, tmp_path: Path) -> None:
    code, make = SWEEP[case]
    proc = make(sim, tmp_path)
    assert proc.returncode == code, _said(proc)


def test_every_code_of_these_commands_is_run_into() -> None:
    cases = {"run": RUN, "report": REPORT, "compare": COMPARE, "sweep": SWEEP}
    for command, table in cases.items():
        assert {c for c, *_ in table.values()} == set(BY_COMMAND[command]), command
