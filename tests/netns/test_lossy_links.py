"""Eight Locust workers on four hosts whose links are slow and lossy — 20 ms ± 5 ms each way and 1 % of the packets
dropped each way (tests/netns/impaired_link.py; this kernel has no `tc netem`) — the master and the target
(bench/server.py) on clean links.

What must hold: TCP carries the run through the loss (retransmissions, never an error), every worker's reports reach
the master, the report's counts equal the raw records one for one and the server finished every request a record
says succeeded, and the verdict is the one the SLOs give: a link's delay is in the latencies (the RTT is ~40 ms
more), not in the counts or the exit code.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from loadgen.locust_plugin.launcher import LOCUSTFILE
from loadgen.sim.truth import load_truth
from tests.integration.harness import read_records, read_report, write_scenario
from tests.netns.hosts import Hosts
from tests.netns.test_workers_across_hosts import LINK, _counts_are_the_records, _wait_listening, start_locust

ROOT = Path(__file__).resolve().parents[2]
WORKER_HOSTS = ("w1", "w2", "w3", "w4")
PER_HOST = 2

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (CI runs as root)")


def _run(tmp_path: Path) -> dict[str, Any]:
    with Hosts(["srv", "master", *WORKER_HOSTS], impaired=dict.fromkeys(WORKER_HOSTS, LINK)) as net:
        truth = tmp_path / "truth.jsonl"
        server = net.popen(
            "srv",
            [sys.executable, "-m", "bench.server", "--host", net.address("srv"), "--port", "8100"]
            + ["--ttft-ms", "20", "--itl-ms", "5", "--output-tokens", "32", "--no-spin", "--truth", str(truth)],
            cwd=ROOT,
        )
        _wait_listening(net, "master", 8100, time.monotonic() + 30)
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"bench": f"http://{net.address('srv')}:8100"},
            load={"users": 2 * PER_HOST * len(WORKER_HOSTS), "spawn_rate": 100, "duration": "10s", "warmup": 0},
            # Judged with room for a retransmission (an RTO is 200 ms or more) but not for a lost request.
            slos=[
                {"metric": "ttft", "stat": "p99", "max_ms": 3000},
                {"metric": "success_rate", "min_percent": 100},
            ],
            run_trust={"loop_lag_p99_ms": 500, "cpu_percent_p90": 100, "schedule_slip_p99_ms": 500},
        )
        raw, report = tmp_path / "raw", tmp_path / "report"
        base = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario), "--headless"]
        base += ["--raw-records", str(raw), "--report-dir", str(report)]
        master_log = (tmp_path / "master.log").open("wb")
        master, _ = start_locust(net, base, master_log, WORKER_HOSTS, PER_HOST)
        master.wait(timeout=180)
        master_log.close()
        server.terminate()
        server.wait(timeout=20)
        carried, dropped = net.link_counts()
        return {
            "code": master.returncode,
            "report": read_report(report),
            "records": read_records(raw),
            "truth": load_truth(truth),
            "log": (tmp_path / "master.log").read_text(errors="replace"),
            "carried": carried,
            "dropped": dropped,
        }


def test_counts_stay_exact_over_slow_lossy_links_and_the_delay_is_in_the_latencies(tmp_path: Path) -> None:
    run = _run(tmp_path)
    report, log = run["report"], run["log"]
    print(f"link: {run['carried']} packets carried, {run['dropped']} dropped; master: {report['run']['master']}")
    # The links really were lossy: about 1 % of what crossed them was dropped (and TCP sent it again).
    assert run["dropped"] > 0.004 * (run["carried"] + run["dropped"]), (run["carried"], run["dropped"])
    assert run["code"] == 0, log[-3000:]
    assert all(s["passed"] for s in report["slos"]), report["slos"]
    assert len(report["run"]["workers"]) == PER_HOST * len(WORKER_HOSTS) and not report["run"]["lost_workers"]
    overall = report["variants"][0]["overall"]
    assert overall["requests"] > 0 and not overall["errors"], overall["errors"]
    _counts_are_the_records(run)
    # The delay is in the latencies, measured: every TTFT holds at least one round trip over the slow link (2 × 15 ms
    # at the least) on top of the server's 20 ms.
    ttfts = [r["ttft"] for r in run["records"] if r["ttft"] is not None]
    assert ttfts and min(ttfts) > 0.020 + 2 * (LINK.delay - LINK.jitter) * 0.9, min(ttfts)
