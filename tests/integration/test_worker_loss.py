"""A worker killed with SIGKILL mid-run: the master finishes, names the lost worker, counts nothing twice. A worker
stopped with SIGTERM mid-run (an evicted or scaled-down pod) hands its figures over as it quits: nothing is lost, and
the master's final flush does not wait for it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from loadgen.locust_plugin.launcher import LOCUSTFILE, free_port
from loadgen.measure.collector import FLUSH_TIMEOUT_S
from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, write_scenario


def test_sigkilled_worker_is_reported_lost_and_nothing_is_double_counted(tmp_path: Path) -> None:
    with start_sim_process(["baseline"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml", {"baseline": sim.base_url("baseline")}, load={"users": 12, "duration": "9s"}
        )
        port = free_port()
        base = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario), "--headless"]
        base += ["--raw-records", str(tmp_path / "raw"), "--report-dir", str(tmp_path / "report")]
        master = subprocess.Popen(
            [*base, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)]
            + ["--expect-workers", "2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        worker_cmd = [*base, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
        workers = [subprocess.Popen(worker_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(2)]
        try:
            # Killed once it has sent requests and reported to the master at least once (Locust's workers report
            # every 3 s): on a busy machine a fixed sleep could kill it before the run even started.
            raw, deadline, pid = tmp_path / "raw", time.monotonic() + 40, str(workers[0].pid)
            while not any(p.stem.split("-")[3] == pid and p.stat().st_size > 0 for p in raw.glob("records-*.jsonl")):
                assert time.monotonic() < deadline, "worker 0 sent nothing in 40 s"
                time.sleep(0.1)
            time.sleep(3.5)
            os.kill(workers[0].pid, signal.SIGKILL)
            _, err = master.communicate(timeout=60)
        finally:
            for p in (master, *workers):
                if p.poll() is None:
                    p.kill()
    assert master.returncode in (0, 1), err.decode()[-2000:]
    report = read_report(tmp_path / "report")
    assert len(report["run"]["lost_workers"]) == 1
    assert "workers_left" not in report["run"]  # killed, it handed nothing over: lost, not left
    # Its users (6 of 12, closed loop, no think time) were mid-request at its last report: counted, not lost unseen.
    [lost] = report["run"]["lost_workers"]
    assert report["run"]["lost_in_flight"].keys() == {lost} and 1 <= report["run"]["lost_in_flight"][lost] <= 6
    assert len(report["run"]["workers"]) == 2
    records = read_records(tmp_path / "raw")
    shards = {p.stem.split("-")[3] for p in (tmp_path / "raw").glob("records-*.jsonl")}
    assert shards == {str(workers[0].pid), str(workers[1].pid)}
    assert len({r["id"] for r in records}) == len(records), "request ids are unique"
    overall = report["variants"][0]["overall"]
    counted = overall["requests"] + overall["warmup_excluded"] + overall["cut_by_stop"]
    # The shards are flushed every 0.25 s, so they hold every request the dead worker finished up to just before
    # the kill; the master merges the rows its last report did not cover. Nothing is missing, nothing doubled.
    assert counted == len(records)
    (note,) = report["run"]["recovered"]
    assert "recovered from its raw shard" in note, note
    dead = [r for r in records if r["id"].split("-")[2] == str(workers[0].pid)]
    assert dead and max(r["done"] for r in dead) > 0


def test_a_worker_stopped_with_sigterm_hands_over_its_figures_and_is_not_waited_for(tmp_path: Path) -> None:
    raw, report_dir = tmp_path / "raw", tmp_path / "report"
    with start_sim_process(["baseline"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml", {"baseline": sim.base_url("baseline")}, load={"users": 8, "duration": "10s"}
        )
        launched = time.monotonic()
        run = subprocess.Popen(
            [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--quiet", "--workers", "2"]
            + ["--raw-records", str(raw), "--report-dir", str(report_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 40
            while sum(p.stat().st_size > 0 for p in raw.glob("records-*.jsonl")) < 2:  # both workers are sending
                assert time.monotonic() < deadline, "the workers sent nothing in 40 s"
                time.sleep(0.1)
            workers = [c for c in psutil.Process(run.pid).children() if "--worker" in c.cmdline()]
            assert len(workers) == 2
            time.sleep(1.0)
            stopped, termed_at = workers[0].pid, time.monotonic()
            workers[0].send_signal(signal.SIGTERM)
            _, err = run.communicate(timeout=90)
            after_term = time.monotonic() - termed_at
            # At most what was left of the 10 s run (counted from the launch: the run itself began later).
            left = 10.0 - (termed_at - launched)
        finally:
            if run.poll() is None:
                run.kill()
    assert run.returncode == 0, err.decode()[-3000:]
    report = read_report(report_dir)
    assert report["run"]["lost_workers"] == [] and report["run"]["recovered"] == [], report["run"]
    assert len(report["run"]["workers"]) == 2
    # It is named as having left, with when (after its first sends, before the 10 s run's end), in every format.
    ((name, at),) = report["run"]["workers_left"].items()
    assert name in report["run"]["workers"] and 0 < at < 10, report["run"]["workers_left"]
    for page in ("report.md", "report.html"):
        assert f"{name} left the run {at:g} s in" in (report_dir / page).read_text()
    records = read_records(raw)
    mine = [r for r in records if r["id"].split("-")[2] == str(stopped)]
    assert mine and len({r["id"] for r in records}) == len(records)
    overall = report["variants"][0]["overall"]
    # Its final delta reached the master: every row of both shards is counted once, without reading a shard.
    assert overall["requests"] + overall["warmup_excluded"] + overall["cut_by_stop"] == len(records)
    # The rest of the run, then the report: not the flush's wait for a worker that never answers on top of it (the
    # margin, 10 s, holds the run's start-up, its drain and the report on a slow sitting).
    assert after_term < left + FLUSH_TIMEOUT_S - 5, (after_term, left)
