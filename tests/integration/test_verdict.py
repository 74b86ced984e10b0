"""The verdict against the simulator's truth: failures fail the gate, and the window counts what happened in it.

- 20 % injected errors on a fast variant: exit 1, the report names the success-rate SLO, the observed rate and
  the error classes; the same run without faults exits 0.
- Throughput of a slow and a fast variant in one run: the report's tokens/s and requests/s agree with the truth
  log cut at the same window (warm-up end → stop) within 1 %.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import read_records, read_report, run_loadgen, write_scenario

FAULTS = {"error_rate": 0.10, "rate_503": 0.05, "rate_429": 0.05}


@pytest.mark.parametrize("faulty", [True, False], ids=["20pct-errors", "no-faults"])
def test_injected_errors_breach_the_success_rate_slo(tmp_path: Path, faulty: bool) -> None:
    faults = {"fast": FAULTS} if faulty else None
    with start_sim_process(["fast=int8"], faults=faults) as sim:
        scenario = write_scenario(tmp_path / "s.yaml", {"fast": sim.base_url("fast")}, load={"duration": "4s"})
        proc = run_loadgen(scenario, "--workers", "0")
    report = read_report(tmp_path / "report")
    sr = next(s for s in report["slos"] if s["metric"] == "success_rate")
    if not faulty:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert sr["passed"] and sr["observed_percent"] == 100.0
        return
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert not sr["passed"]
    assert 70.0 < sr["observed_percent"] < 90.0  # 80 % expected
    assert set(sr["errors"]) == {"http_5xx", "http_429"}
    overall = report["variants"][0]["overall"]
    failed = sum(overall["errors"].values())
    # An HTTP error never produced a token: censored in TTFT, and in E2E and TPOT as every failure is.
    assert overall["censored"] == {"ttft": failed, "e2e": failed, "tpot": failed}
    md = (tmp_path / "report" / "report.md").read_text()
    assert "success rate ≥ 99 %" in md and "**FAIL**" in md and "http_429" in md


def test_window_throughput_matches_the_truth_log(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    with start_sim_process(["slow=baseline", "fast=int8"], truth_log=truth_path) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"slow": sim.base_url("slow"), "fast": sim.base_url("fast")},
            load={"users": 16, "duration": "9s", "warmup": "3s"},
        )
        proc = run_loadgen(scenario, "--workers", "1", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = read_report(tmp_path / "report")
    start, end = report["run"]["window_monotonic"]
    assert end - start == pytest.approx(report["run"]["window_s"], abs=0.1)
    records = read_records(tmp_path / "raw")
    # Requests in flight at the stop finished in the drain after it: measured whole, their tokens after the window's
    # end outside throughput.
    assert not any(r["cut_by_stop"] for r in records) and any(r["done"] > end for r in records)
    # The same window cut from what the server wrote: tokens whose chunk was written in it, requests it finished in
    # it. Client stamps trail the writes by well under a millisecond, so only chunks at the two edges may differ.
    for v in report["variants"]:
        truth = load_truth(truth_path, variant=v["name"])
        tokens = sum(
            n for t in truth.values() for ts, n in zip(t.chunk_times, t.chunk_tokens, strict=True) if start <= ts <= end
        )
        # Throughput counts what completed in the window, whichever window it was sent in (the latencies are of the
        # requests sent in it).
        finished = sum(1 for t in truth.values() if t.finish is not None and not t.aborted and start <= t.finish <= end)
        o = v["overall"]
        print(f"{v['name']}: tokens {o['output_tokens']} vs truth {tokens}, requests {o['ok']} vs truth {finished}")
        assert o["output_tokens"] == pytest.approx(tokens, rel=0.01), v["name"]
        window = report["run"]["window_s"]
        assert o["requests_per_s"] * window == pytest.approx(finished, rel=0.01, abs=1), v["name"]
        assert o["output_tokens_per_s"] == pytest.approx(tokens / (end - start), rel=0.01)
    slow, fast = (next(v for v in report["variants"] if v["name"] == n)["overall"] for n in ("slow", "fast"))
    assert fast["output_tokens_per_s"] > slow["output_tokens_per_s"]


def test_a_breached_latency_slo_exits_1(tmp_path: Path) -> None:
    with start_sim_process(["fast=int8"]) as sim:
        slos = [{"metric": "ttft", "stat": "p50", "max_ms": 0.5}, {"metric": "e2e", "stat": "p99", "max_ms": 60000}]
        scenario = write_scenario(
            tmp_path / "s.yaml", {"fast": sim.base_url("fast")}, load={"duration": "3s"}, slos=slos
        )
        proc = run_loadgen(scenario, "--workers", "0")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    ttft, e2e = read_report(tmp_path / "report")["slos"]
    assert not ttft["passed"] and ttft["observed_ms"] > 0.5  # a real TTFT is well above half a millisecond
    assert e2e["passed"] and e2e["observed_ms"] < 60000
