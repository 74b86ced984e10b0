"""Sixteen Locust workers on four other hosts (network namespaces on a bridge), the master on a fifth and the target
(bench/server.py, the fast ground-truth server) on a sixth. Every worker host's link is slow and lossy (20 ms ± 5 ms
each way, 1 % of the packets dropped each way). Mid-run two worker hosts are cut off: w1 for 10 s and then healed,
w2 for good.

What must hold: the master sees the cut (both hosts' workers go missing), w1's workers heal and their figures from
after the heal arrive, w2's workers are named lost and what they finished is recovered from their raw shards (a
shared volume here), and the report's counts equal the raw records exactly — nothing lost, nothing counted twice —
while the server's own log received every request the records say succeeded (docs/performance.md, "Workers on
other hosts").
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import pytest

from loadgen.locust_plugin.launcher import LOCUSTFILE
from loadgen.sim.truth import load_truth
from tests.integration.harness import read_records, read_report, write_scenario
from tests.netns.hosts import Hosts
from tests.netns.impaired_link import Impairment

ROOT = Path(__file__).resolve().parents[2]
WORKER_HOSTS = ("w1", "w2", "w3", "w4")
PER_HOST = 4
# Every worker host's link, each way (impaired_link.py: this kernel has no `tc netem`).
LINK = Impairment(delay=0.020, jitter=0.005, loss=0.01)

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (CI runs as root)")


def _wait_listening(net: Hosts, host: str, port: int, deadline: float) -> None:
    probe = f"import socket; socket.create_connection(('{net.address('srv')}', {port}), timeout=1).close()"
    while True:
        p = net.popen(host, [sys.executable, "-c", probe])
        if p.wait(timeout=10) == 0:
            return
        assert time.monotonic() < deadline, "the target did not listen"
        time.sleep(0.2)


def start_locust(
    net: Hosts, base: list[str], master_log: IO[bytes], hosts: Sequence[str], per_host: int
) -> tuple[subprocess.Popen[bytes], dict[str, list[subprocess.Popen[bytes]]]]:
    """Locust's master on host "master" (its log to `master_log`) and `per_host` workers on each of `hosts`, all
    from the command `base`; the master waits for every worker."""
    master = net.popen(
        "master",
        [*base, "--master", "--master-bind-host", net.address("master"), "--master-bind-port", "5557"]
        + ["--expect-workers", str(per_host * len(hosts)), "--expect-workers-max-wait", "120"],
        log=master_log,
    )
    worker = [*base, "--worker", "--master-host", net.address("master"), "--master-port", "5557"]
    return master, {host: [net.popen(host, worker) for _ in range(per_host)] for host in hosts}


def _run(tmp_path: Path, heal_after: float) -> dict[str, Any]:
    with Hosts(["srv", "master", *WORKER_HOSTS], impaired=dict.fromkeys(WORKER_HOSTS, LINK)) as net:
        truth = tmp_path / "truth.jsonl"
        server = net.popen(
            "srv",
            [sys.executable, "-m", "bench.server", "--host", net.address("srv"), "--port", "8100"]
            + ["--ttft-ms", "20", "--itl-ms", "5", "--truth", str(truth)],
            cwd=ROOT,
        )
        _wait_listening(net, "master", 8100, time.monotonic() + 30)
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"bench": f"http://{net.address('srv')}:8100"},
            # Two users per worker; the run outlasts the heal by enough for every healed worker to report again: a
            # 10-s cut leaves each TCP connection in retransmit backoff (its next try up to a few seconds after the
            # heal), and on a slow start the cut itself comes late (it waits for the workers' first rows). With
            # 30 s, one of w1's workers was still missing at the end of a fresh-clone run, and so named lost.
            load={"users": 2 * PER_HOST * len(WORKER_HOSTS), "spawn_rate": 100, "duration": "45s", "warmup": 0},
            slos=[],
            run_trust={"loop_lag_p99_ms": 500, "cpu_percent_p90": 100, "schedule_slip_p99_ms": 500},
        )
        raw, report = tmp_path / "raw", tmp_path / "report"
        base = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario), "--headless"]
        base += ["--raw-records", str(raw), "--report-dir", str(report)]
        master_log = (tmp_path / "master.log").open("wb")
        master, workers = start_locust(net, base, master_log, WORKER_HOSTS, PER_HOST)
        # Cut w1 once its workers have sent requests (their shards hold rows): on a slow start a fixed sleep could
        # cut it before the run began.
        cut_pids = {str(p.pid) for host in ("w1", "w2") for p in workers[host]}
        deadline = time.monotonic() + 120
        while not cut_pids <= {p.stem.split("-")[3] for p in raw.glob("records-*.jsonl") if p.stat().st_size > 0}:
            assert time.monotonic() < deadline and master.poll() is None, "w1's workers sent nothing"
            time.sleep(0.2)
        time.sleep(4.0)  # past a report interval (3 s): the master has their figures from before the cut
        net.cut("w1")
        net.cut("w2")
        time.sleep(heal_after)
        net.heal("w1")
        heal_at = time.monotonic()
        master.wait(timeout=150)
        # What the report covers is what the shards held when the master ended: w2's workers, cut off from the
        # server too, may still end stalled requests afterwards (not part of the run).
        records = read_records(raw)
        master_log.close()
        server.terminate()
        server.wait(timeout=20)
        return {
            "code": master.returncode,
            "report": read_report(report),
            "records": records,
            "truth": load_truth(truth),
            "log": (tmp_path / "master.log").read_text(errors="replace"),
            "pids": {host: {str(p.pid) for p in procs} for host, procs in workers.items()},
            "heal_at": heal_at,
        }


def _counts_are_the_records(run: dict[str, Any]) -> None:
    report, records, truth = run["report"], run["records"], run["truth"]
    assert len({r["id"] for r in records}) == len(records), "request ids are unique"
    overall = report["variants"][0]["overall"]
    counted = overall["requests"] + overall["warmup_excluded"] + overall["cut_by_stop"]
    assert counted == len(records), (counted, len(records))
    assert overall["ok"] == sum(1 for r in records if r["error"] is None and not r["cut_by_stop"])
    # The server received every request a record says went out and finished every one a record says succeeded.
    for r in records:
        if r["error"] is None and not r["cut_by_stop"]:
            t = truth[r["id"]]
            assert t.finish is not None and sum(t.chunk_tokens) == r["output_tokens"], r["id"]


def test_a_cut_host_that_heals_reports_again_and_one_that_never_does_is_named_lost(tmp_path: Path) -> None:
    run = _run(tmp_path, heal_after=10.0)
    report, log = run["report"], run["log"]
    assert run["code"] == 0, log[-3000:]
    assert len(report["run"]["workers"]) == PER_HOST * len(WORKER_HOSTS)
    # The master noticed: both cut hosts' workers missed their heartbeats; w1's came back.
    assert log.count("setting state to missing") >= 2 * PER_HOST, log[-3000:]
    # Locust logs a heal when a missing worker's heartbeat gets through again; whether each of w1's workers gets one
    # in before the run ends depends on when the cut began on a slow start (3 of 4 seen once in CI). That w1's
    # workers are not lost and their requests after the heal count is held below, from the report.
    assert log.count("self-healed with heartbeat") >= 1, log[-3000:]
    by_host = {h: [r for r in run["records"] if r["id"].split("-")[2] in pids] for h, pids in run["pids"].items()}
    # w1 healed: its requests from after the heal are in the counts. w2 never did: its workers are named lost.
    assert any(r["sent"] > run["heal_at"] and r["error"] is None for r in by_host["w1"])
    assert len(report["run"]["lost_workers"]) == PER_HOST, report["run"]
    assert by_host["w2"] and all(r["sent"] < run["heal_at"] for r in by_host["w2"])
    assert len(report["run"]["recovered"]) == PER_HOST and all(
        "recovered from its raw shard" in note for note in report["run"]["recovered"]
    ), report["run"]["recovered"]
    # The master's own cost is in the report: every worker's reports merged, per interval, and its memory.
    master = report["run"]["master"]
    print(f"master: {master}")
    assert master["reports_merged"] >= PER_HOST * len(WORKER_HOSTS) * 5 and master["rss_peak_mb"] > 0
    assert 0 < master["merge_ms_per_interval_p50"] <= master["merge_ms_per_interval_max"] <= master["merge_ms_total"]
    _counts_are_the_records(run)
