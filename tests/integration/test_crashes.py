"""A crash is never a verdict, on the simulator: each way a run can crash exits 4 (or 128 + N for a master killed
by signal N) and keeps what it can, and the exceptions Locust catches in users make the run untrustworthy (exit 3)
and are named. Locust runs in child processes (the locustfiles here inject each fault)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil

from loadgen.locust_plugin.launcher import LOCUSTFILE, free_port
from loadgen.report.combine import AGGREGATE_FILE
from loadgen.sim.launch import start_sim_process

from .harness import read_report, write_scenario

_HEAD = """
from loadgen.locust_plugin import run_end
from loadgen.locust_plugin.plugin import register
from loadgen.locust_plugin.user import LLMUser

register()
"""
# Building the report raises (a bug in a report section): the greenlet that ends the run dies with it.
REPORT_RAISES = (
    _HEAD
    + """
def _broken(*args, **kwargs):
    raise RuntimeError("injected: the report cannot be built")

run_end.current_report = _broken

class StreamingLLMUser(LLMUser):
    pass
"""
)
# Every 4th request a user's task raises: Locust catches it (runner.exceptions) and the user goes on.
TASK_RAISES = (
    _HEAD
    + """
from loadgen.locust_plugin.request_stream import RequestStream

_send, _calls = RequestStream.send_next, [0]

def _flaky(self, *args, **kwargs):
    _calls[0] += 1
    if _calls[0] % 4 == 0:
        raise KeyError("choices")
    return _send(self, *args, **kwargs)

RequestStream.send_next = _flaky

class StreamingLLMUser(LLMUser):
    pass
"""
)
# The first user of each process raises in on_start: its greenlet dies (an unhandled exception in a user).
ON_START_RAISES = (
    _HEAD
    + """
_started = [0]

class StreamingLLMUser(LLMUser):
    def on_start(self):
        _started[0] += 1
        if _started[0] == 1:
            raise RuntimeError("injected: on_start failed")
"""
)


def _locust(locustfile: Path, scenario: Path, report: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "locust", "-f", str(locustfile), "--scenario", str(scenario), "--headless"] + [
        "--report-dir",
        str(report),
        *extra,
    ]


def _file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_report_that_cannot_be_built_ends_the_run_as_failed_instead_of_hanging(tmp_path: Path) -> None:
    with start_sim_process(["baseline"]) as sim:
        scenario = write_scenario(tmp_path / "s.yaml", {"baseline": sim.base_url("baseline")}, load={"duration": "3s"})
        lf = _file(tmp_path, "crash_report.py", REPORT_RAISES)
        proc = subprocess.run(_locust(lf, scenario, tmp_path / "report"), capture_output=True, text=True, timeout=90)
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert "injected: the report cannot be built" in proc.stderr
    assert not (tmp_path / "report" / "report.json").exists()
    assert (tmp_path / "report" / AGGREGATE_FILE).exists()  # the exact histograms are kept


def test_exceptions_in_users_tasks_make_the_run_untrustworthy_and_are_named(tmp_path: Path) -> None:
    with start_sim_process(["baseline"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml", {"baseline": sim.base_url("baseline")}, load={"users": 4, "duration": "3s"}
        )
        lf = _file(tmp_path, "task_raises.py", TASK_RAISES)
        proc = subprocess.run(_locust(lf, scenario, tmp_path / "report"), capture_output=True, text=True, timeout=90)
    assert proc.returncode == 3, proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    (exc,) = report["run"]["user_exceptions"]
    assert exc["message"] == "'choices'" and exc["count"] >= 1 and exc["nodes"] == ["local"]
    assert "_flaky" in exc["where"]
    assert any("Locust users raised" in r and "'choices'" in r for r in report["run"]["untrustworthy_reasons"])
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "exception in users" in md and "'choices'" in md


def test_an_unhandled_exception_in_a_workers_user_fails_the_run(tmp_path: Path) -> None:
    with start_sim_process(["baseline"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml", {"baseline": sim.base_url("baseline")}, load={"users": 4, "duration": "4s"}
        )
        lf = _file(tmp_path, "on_start_raises.py", ON_START_RAISES)
        port = free_port()
        base = _locust(lf, scenario, tmp_path / "report")
        master = subprocess.Popen(
            [*base, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)]
            + ["--expect-workers", "1"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        worker = subprocess.Popen(
            [*base, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _, err = master.communicate(timeout=90)
        finally:
            for p in (master, worker):
                if p.poll() is None:
                    p.kill()
    assert master.returncode == 4, err.decode()[-3000:]
    report = read_report(tmp_path / "report")
    assert report["exit_code"] == 4
    (failed,) = report["run"]["failed"]
    assert failed.startswith("worker-0: unhandled exception in a greenlet: RuntimeError: injected: on_start failed")
    assert report["variants"][0]["overall"]["requests"] > 0  # what the other users measured is kept
    assert "**FAILED**" in (tmp_path / "report" / "report.md").read_text(encoding="utf-8")


def _wait_for_rows(raw: Path, deadline_s: float = 40.0) -> None:
    deadline = time.monotonic() + deadline_s
    while not any(p.stat().st_size > 0 for p in raw.glob("records-*.jsonl")):
        assert time.monotonic() < deadline, "no request recorded"
        time.sleep(0.1)


def test_a_master_killed_by_a_signal_exits_128_plus_n_with_a_report_rebuilt_from_the_shards(tmp_path: Path) -> None:
    with start_sim_process(["baseline"]) as sim:
        scenario = write_scenario(tmp_path / "s.yaml", {"baseline": sim.base_url("baseline")}, load={"duration": "60s"})
        raw = tmp_path / "raw"
        cmd = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--quiet", "--workers", "0"]
        run = subprocess.Popen(
            [*cmd, "--raw-records", str(raw), "--report-dir", str(tmp_path / "report")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            raw.mkdir(exist_ok=True)
            _wait_for_rows(raw)
            time.sleep(1.0)
            (master,) = [c for c in psutil.Process(run.pid).children() if "locust" in " ".join(c.cmdline())]
            os.kill(master.pid, signal.SIGKILL)
            _, err = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
    assert run.returncode == 128 + signal.SIGKILL, err.decode()[-3000:]  # not 247
    assert "killed by signal 9 (SIGKILL)" in err.decode()
    report = read_report(tmp_path / "report")
    assert report["exit_code"] == 4 and report["run"]["rebuilt_from_records"]["rows"] > 0
    assert "killed by signal 9 (SIGKILL)" in report["run"]["failed"][0]
    rows = sum(1 for p in raw.glob("records-*.jsonl") for line in p.read_bytes().split(b"\n") if line.strip())
    assert report["run"]["rebuilt_from_records"]["rows"] in (rows, rows - 1)  # a row cut by the kill is not one


def test_a_headless_run_stopped_by_sigterm_before_its_end_is_no_verdict(tmp_path: Path) -> None:
    with start_sim_process(["baseline"]) as sim:
        scenario = write_scenario(tmp_path / "s.yaml", {"baseline": sim.base_url("baseline")}, load={"duration": "60s"})
        raw = tmp_path / "raw"
        cmd = _locust(LOCUSTFILE, scenario, tmp_path / "report", "--raw-records", str(raw))
        master = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            raw.mkdir(exist_ok=True)
            _wait_for_rows(raw)
            time.sleep(1.0)
            master.send_signal(signal.SIGTERM)  # an evicted pod, a deleted Job
            _, err = master.communicate(timeout=60)
        finally:
            if master.poll() is None:
                master.kill()
    assert master.returncode == 4, err.decode()[-3000:]
    report = orjson.loads((tmp_path / "report" / "report.json").read_bytes())
    assert report["exit_code"] == 4
    (failed,) = report["run"]["failed"]
    assert "stopped" in failed and "into its 60 s" in failed
    assert report["variants"][0]["overall"]["requests"] > 0  # what it measured until then is kept
