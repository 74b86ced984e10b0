"""A real run with raw records, exported as `vllm bench serve --save-result --save-detailed` writes: every list has
one entry per request the export counts (completed + failed), the failures are the requests sent that failed, and
the lists agree with the shards and with the report's own figures."""

from __future__ import annotations

import statistics
import subprocess
import sys
from pathlib import Path

import orjson

from loadgen.report.vllm_bench_detail import LIST_KEYS
from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, run_loadgen, write_scenario


def test_a_run_with_raw_records_exports_vllms_per_request_lists(tmp_path: Path) -> None:
    raw = tmp_path / "raw"
    with start_sim_process(["a=baseline", "b=baseline"], faults={"b": {"error_rate": 0.25}}) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"a": sim.base_url("a"), "b": sim.base_url("b")},
            load={"users": 4, "duration": "4s", "warmup": "1s"},
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(raw))
    assert proc.returncode in (0, 1, 3), proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    out = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "report", str(tmp_path / "report"), "--format", "vllm-bench"]
        + ["--raw-records", str(raw), "--exit-zero"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    results = [orjson.loads(line) for line in out.stdout.splitlines()]
    rows = read_records(raw)
    for r, v in zip(results, report["variants"], strict=True):
        o = v["overall"]
        n = r["completed"] + r["failed"]
        assert n > 0 and r["completed"] == o["ok"] and r["failed"] == o["requests"] - o["ok"]
        assert r["max_concurrency"] == 2  # its own half of load.users, not the 4 of the run
        written = r["loadgen_per_request"]["written"]
        assert written == [k for k in LIST_KEYS if k != "generated_texts"]
        assert all(len(r[k]) == n for k in written)
        assert sum(1 for e in r["errors"] if e) == r["failed"]
        mine = [x for x in rows if x["variant"] == v["name"] and not x["warmup"] and not x["cut_by_stop"]]
        assert sorted(r["start_times"]) == r["start_times"] == sorted(round(x["sent"], 6) for x in mine)
        ok = [i for i, e in enumerate(r["errors"]) if not e]
        # The report's TTFT histogram (±0.1 %) and the listed TTFTs of the successes agree (HTTP 500s have none).
        assert abs(statistics.fmean(r["ttfts"][i] for i in ok) * 1e3 / r["mean_ttft_ms"] - 1) < 0.01
        assert sum(r["output_lens"]) == sum(x["output_tokens"] for x in mine if x["error"] is None)
        assert all(r["latencies"][i] >= r["ttfts"][i] > 0 for i in ok)
    assert results[1]["failed"] > 0  # b answered a quarter of its requests with HTTP 500
