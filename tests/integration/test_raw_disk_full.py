"""`--raw-records` onto a disk that fills mid-run (a real 128 KiB tmpfs): the worker's shard stops with one clear
error naming the worker and the folder, the worker keeps answering its master (histograms and counters whole, the
final flush answered, no lost worker), and the report names the worker and the rows its shard is missing. Every
request the worker measured is either a row of the shard or one of the rows the report counts as lost."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, run_loadgen, write_scenario


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs (a disk that fills) needs root; CI runs as root")
    mnt = tmp_path / "small-disk"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=128k", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_stops_the_raw_shard_and_loses_nothing_measured(tmp_path: Path, full_disk: Path) -> None:
    raw = full_disk / "raw"
    with start_sim_process(["baseline"]) as sim:
        scenario = write_scenario(tmp_path / "s.yaml", {"baseline": sim.base_url("baseline")})
        proc = run_loadgen(scenario, "--workers", "1", "--raw-records", str(raw))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr  # a verdict: nothing crashed, no worker lost
    report = read_report(tmp_path / "report")
    assert report["run"]["lost_workers"] == [] and "failed" not in report["run"]
    (lost,) = report["run"]["raw_records_lost"]
    assert lost["worker"] == "worker-0" and lost["folder"] == str(raw.resolve())
    assert "No space left on device" in lost["error"]
    rows = read_records(raw)  # the shard holds whole rows only: a batch cut by the full disk was taken back out
    assert rows and lost["rows"] > 0
    overall = report["variants"][0]["overall"]
    counted = overall["requests"] + overall["warmup_excluded"] + overall["cut_by_stop"]
    assert counted == len(rows) + lost["rows"], (counted, len(rows), lost["rows"])
    print(f"disk full: {counted} requests measured, {len(rows)} rows in the shard, {lost['rows']} rows lost")
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert f"raw records of worker-0: {lost['rows']} rows lost" in md
    log = (tmp_path / "report" / "locust-worker-0.log").read_text(encoding="utf-8")
    assert log.count("writing raw records to") == 1, log[-3000:]
    assert "worker-0 (pid " in log and str(raw) in log
