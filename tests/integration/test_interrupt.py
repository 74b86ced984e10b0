"""Stopping `loadgen run` from outside loses nothing measured. Ctrl-C at a terminal signals the whole foreground
process group: here the launcher leads a group of its own and the group gets SIGINT, as from a terminal. The master
and the workers run in sessions of their own, so only the launcher gets it; it asks the master to stop, the master
collects every worker's final figures and writes the report, marked interrupted, whose counts equal the raw
records'. A second Ctrl-C kills everything at once (exit 130). A master that dies (SIGKILL) mid-run leaves raw
shards that `loadgen report DIR --scenario S` turns into a report holding every row."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil

from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, write_scenario


def _start(tmp_path: Path, base_url: str, workers: int) -> tuple[subprocess.Popen[bytes], Path, Path]:
    scenario = write_scenario(tmp_path / "s.yaml", {"baseline": base_url}, load={"users": 8, "duration": "60s"})
    raw = tmp_path / "raw"
    cmd = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--quiet", "--workers", str(workers)]
    run = subprocess.Popen(
        [*cmd, "--raw-records", str(raw), "--report-dir", str(tmp_path / "report")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the launcher leads its own process group, like a shell's foreground job
    )
    return run, raw, scenario


def _wait_for_rows(raw: Path, shards: int, deadline_s: float = 40.0) -> None:
    """Until `shards` processes have each written rows (every worker is measuring)."""
    deadline = time.monotonic() + deadline_s
    while sum(p.stat().st_size > 0 for p in raw.glob("records-*.jsonl")) < shards:
        assert time.monotonic() < deadline, "no requests recorded"
        time.sleep(0.1)


def _children(pid: int) -> list[psutil.Process]:
    return psutil.Process(pid).children(recursive=True)


def _counted(report: dict) -> int:
    o = report["variants"][0]["overall"]
    return int(o["requests"] + o["warmup_excluded"] + o["cut_by_stop"])


def test_ctrl_c_stops_the_run_and_the_report_holds_every_workers_last_figures(tmp_path: Path) -> None:
    with start_sim_process(["baseline"]) as sim:
        run, raw, _ = _start(tmp_path, sim.base_url("baseline"), workers=2)
        try:
            _wait_for_rows(raw, shards=2)
            children = _children(run.pid)
            time.sleep(1.0)
            os.killpg(run.pid, signal.SIGINT)  # a terminal's Ctrl-C: to the foreground group
            _, err = run.communicate(timeout=60)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
    stderr = err.decode()
    assert run.returncode == 4, stderr[-3000:]  # a report, and no verdict
    assert "SIGINT: stopping the run" in stderr
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children), "a process was left"
    report = read_report(tmp_path / "report")
    assert report["run"]["interrupted"] is True and report["exit_code"] == 4
    (failed,) = report["run"]["failed"]
    assert "interrupted" in failed and "into its 60 s" in failed
    assert report["run"]["lost_workers"] == [] and len(report["run"]["workers"]) == 2
    rows = read_records(raw)
    # Each worker stopped on its master's word, after its final delta: nothing a worker measured is missing.
    assert rows and _counted(report) == len(rows), (_counted(report), len(rows))
    for name in ("locust-worker-0.log", "locust-worker-1.log"):
        log = (tmp_path / "report" / name).read_text(encoding="utf-8")
        assert "KeyboardInterrupt" not in log, log[-2000:]


def test_a_second_ctrl_c_kills_everything_at_once(tmp_path: Path) -> None:
    with start_sim_process(["baseline"]) as sim:
        run, raw, _ = _start(tmp_path, sim.base_url("baseline"), workers=1)
        try:
            _wait_for_rows(raw, shards=1)
            children = _children(run.pid)
            os.killpg(run.pid, signal.SIGINT)
            time.sleep(0.3)
            os.killpg(run.pid, signal.SIGINT)
            _, err = run.communicate(timeout=30)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 128 + signal.SIGINT, err.decode()[-3000:]
    assert "SIGINT again: killing" in err.decode()
    psutil.wait_procs(children, timeout=5)
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children), "a process was left"
    report = read_report(tmp_path / "report")
    (failed,) = report["run"]["failed"]
    assert report["exit_code"] == 4 and "killed by a second signal 2 (SIGINT) to loadgen run" in failed, failed


def test_a_master_killed_mid_run_leaves_shards_that_loadgen_report_turns_into_a_report(tmp_path: Path) -> None:
    with start_sim_process(["baseline"]) as sim:
        run, raw, scenario = _start(tmp_path, sim.base_url("baseline"), workers=2)
        try:
            _wait_for_rows(raw, shards=2)
            time.sleep(1.0)
            (master,) = [c for c in run_children(run.pid) if "--master" in c.cmdline()]
            master.kill()  # SIGKILL: no report, no final flush
            _, err = run.communicate(timeout=40)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
    assert run.returncode == 128 + signal.SIGKILL, err.decode()[-3000:]
    rows = read_records(raw)
    assert len({p.name for p in raw.glob("records-*.jsonl")}) == 2 and rows
    out = tmp_path / "rebuilt.json"
    cmd = [sys.executable, "-m", "loadgen.cli", "report", str(raw), "--scenario", str(scenario), "--format", "json"]
    proc = subprocess.run([*cmd, "--out", str(out), "--exit-zero"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rebuilt = orjson.loads(out.read_bytes())
    assert _counted(rebuilt) == len(rows), (_counted(rebuilt), len(rows))
    # The launcher rebuilt the same report from the same shards when its master died.
    assert _counted(read_report(tmp_path / "report")) == len(rows)


def run_children(pid: int) -> list[psutil.Process]:
    return [c for c in _children(pid) if "locust" in " ".join(c.cmdline())]


def test_ctrl_c_in_a_sequential_run_stops_the_run_not_its_phase(tmp_path: Path) -> None:
    # load.sequential: `loadgen run` runs each variant in a Locust run of its own. Ctrl-C during the first stops the
    # whole run (exit 4): the first phase's report marked interrupted, the second variant never sent a request, no
    # combined report.
    with start_sim_process(["a=baseline", "b=baseline"], truth_log=tmp_path / "truth.jsonl") as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"a": sim.base_url("a"), "b": sim.base_url("b")},
            load={"users": 4, "duration": "60s", "sequential": True},
        )
        raw = tmp_path / "raw"
        cmd = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--quiet", "--workers", "1"]
        run = subprocess.Popen(
            [*cmd, "--raw-records", str(raw), "--report-dir", str(tmp_path / "report")],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        try:
            _wait_for_rows(raw / "a", shards=1)
            os.killpg(run.pid, signal.SIGINT)
            _, err = run.communicate(timeout=90)
        finally:
            if run.poll() is None:
                os.killpg(run.pid, signal.SIGKILL)
        time.sleep(1.5)  # the simulator flushes its truth log every second
    stderr = err.decode()
    assert run.returncode == 4, stderr[-3000:]
    assert "interrupted during variant 'a'" in stderr and "not run: 'b'" in stderr, stderr[-3000:]
    phase = read_report(next((tmp_path / "report" / "phases").glob("*-a")))
    assert phase["run"]["interrupted"] is True
    assert not (tmp_path / "report" / "report.json").exists()
    assert not list((tmp_path / "report" / "phases").glob("*-b/report.json"))
    truth = [orjson.loads(line) for line in (tmp_path / "truth.jsonl").read_bytes().splitlines() if line.strip()]
    assert truth and all(t["variant"] == "a" for t in truth), {t["variant"] for t in truth}
