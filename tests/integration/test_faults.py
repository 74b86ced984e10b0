"""A misbehaving target: every injected fault is counted and classified as what it was, request by request.

The simulator logs which fault it injected into which request; loadgen's raw records say how each request ended.
No worker may crash, and a partial stream keeps the timings it got.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import read_records, read_report, run_loadgen, write_scenario

FAULTS = {
    "error_rate": 0.06,
    "rate_429": 0.06,
    "rate_503": 0.06,
    "json_error_on_stream_rate": 0.06,
    "reset_rate": 0.08,
    "cut_rate": 0.08,
    "error_event_rate": 0.08,
    "malformed_rate": 0.06,
    "stall_rate": 0.04,
    "stall_s": 1.2,
}
# What each injected fault must be classified as (the read timeout below is shorter than the stall).
EXPECTED = {
    "http_500": "http_5xx",
    "http_503": "http_5xx",
    "http_429": "http_429",
    "json_error_on_stream": "http_4xx",
    "reset": "stream_interrupted",
    "cut": "stream_interrupted",
    "error_event": "server_error",
    "malformed": "malformed",
    "stall": "timeout",
}


def test_every_fault_is_classified_and_counted(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    with start_sim_process(["faulty=int8"], truth_log=truth_path, faults={"faulty": FAULTS}) as sim:
        scenario = write_scenario(tmp_path / "s.yaml", {"faulty": sim.base_url("faulty")}, load={"users": 16})
        scenario.write_text(
            scenario.read_text().replace(
                "continuous_usage_stats: true", "continuous_usage_stats: true\n  read_timeout: 0.5s"
            )
        )
        proc = run_loadgen(scenario, "--workers", "1", "--raw-records", str(tmp_path / "raw"))
    # About half the requests are faulted: the success-rate SLO fails the run (it used to pass with exit 0).
    assert proc.returncode == 1, proc.stdout + proc.stderr
    truth = load_truth(truth_path)
    records = read_records(tmp_path / "raw")
    assert len(records) > 150
    seen: Counter[str] = Counter()
    cut = [r for r in records if r["cut_by_stop"]]
    assert all(r["error"] is None for r in cut), "a request in flight at the stop is not an error"
    records = [r for r in records if not r["cut_by_stop"]]
    for r in records:
        faults = truth[r["id"]].faults
        # The first fault in the request's life decides how it ends (a malformed chunk before a later reset, …).
        decisive = next((f for f in faults if f in EXPECTED), None)
        if decisive is None:
            assert r["error"] is None, (r["id"], faults, r["error"], r["error_detail"])
            continue
        seen[decisive] += 1
        assert r["error"] == EXPECTED[decisive], (r["id"], faults, r["error"], r["error_detail"])
        if decisive in ("reset", "cut", "error_event", "stall"):
            assert r["chunk_times"], "a partial stream keeps the timings it got"
    assert set(seen) == set(EXPECTED), seen
    report = read_report(tmp_path / "report")
    overall = report["variants"][0]["overall"]
    by_class: Counter[str] = Counter(r["error"] for r in records if r["error"] and not r["warmup"])
    assert overall["errors"] == dict(by_class)
    assert report["run"]["lost_workers"] == []
    sr = next(s for s in report["slos"] if s["metric"] == "success_rate")
    assert not sr["passed"] and sr["errors"] == dict(by_class)


def test_slow_headers_are_part_of_ttft_and_not_an_error(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    with start_sim_process(["slow=int8"], truth_log=truth_path, faults={"slow": {"slow_headers_s": 0.3}}) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml", {"slow": sim.base_url("slow")}, load={"users": 4, "duration": "3s"}
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    truth = load_truth(truth_path)
    records = [r for r in read_records(tmp_path / "raw") if not r["cut_by_stop"]]
    assert records and all(r["error"] is None for r in records)
    for r in records:
        assert r["ttft"] >= 0.3
        # The held chunks arrive together once headers go out: the client's first token is no earlier.
        assert r["chunk_times"][0] >= truth[r["id"]].chunk_times[0]
