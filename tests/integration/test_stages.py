"""Load in stages end to end against the simulator: closed-loop user stages through Locust's LoadTestShape (the
users in flight follow the stages, and the run ends with the last one), and open-loop rate stages (each stage's
arrivals at its rate)."""

from __future__ import annotations

import math
from pathlib import Path

from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, run_loadgen, write_scenario


def _in_flight(rows: list[dict[str, object]], t: float) -> int:
    return sum(1 for r in rows if float(r["sent"]) <= t < float(r["done"]))  # type: ignore[arg-type]


def test_user_stages_follow_the_shape_and_end_the_run(tmp_path: Path) -> None:
    with start_sim_process(["a=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"a": sim.base_url("a")},
            load={"spawn_rate": 100, "stages": [{"duration": "3s", "users": 2}, {"duration": "3s", "users": 8}]},
            slos=[],
        )
        proc = run_loadgen(scenario, "--workers", "1", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = read_report(tmp_path / "report")
    assert 5.0 < report["run"]["duration_s"] < 9.0 and report["run"]["finished"]
    rows = [r for r in read_records(tmp_path / "raw") if r["done"] is not None]
    start = min(float(r["sent"]) for r in rows)
    # Sampled every 50 ms: at most 2 in flight in the first stage (after its spawn), 8 and more than 2 in the second
    # from 1.5 s into it (Locust's shape ticks once a second, then spawns: a floors-job run still had 2 in flight
    # 1 s in).
    first = [_in_flight(rows, start + 0.5 + i * 0.05) for i in range(40)]
    second = [_in_flight(rows, start + 4.5 + i * 0.05) for i in range(20)]
    assert max(first) <= 2, first
    assert max(second) <= 8 and min(second) > 2, second


def test_rate_stages_send_each_stage_at_its_rate(tmp_path: Path) -> None:
    low, high = 10.0, 40.0
    with start_sim_process(["a=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"a": sim.base_url("a")},
            load={
                "users": 32,
                "arrival": {
                    "kind": "poisson",
                    "stages": [{"duration": "3s", "rate": low}, {"duration": "3s", "rate": high}],
                },
            },
            slos=[],
            # The stages' rates are under test, not the generator's trust: a stall of a shared 2-core CI machine
            # past the default 5 ms slip p99 would exit 3 (tests/integration/test_open_loop.py does the same).
            run_trust={"loop_lag_p99_ms": 200, "schedule_slip_p99_ms": 200},
        )
        proc = run_loadgen(scenario, "--workers", "1", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = read_report(tmp_path / "report")
    o = report["variants"][0]["open_loop"]
    assert o["stages"] == [
        {"duration": 3.0, "rate": low, "ramp": False},
        {"duration": 3.0, "rate": high, "ramp": False},
    ]
    assert o["requested_rate_per_s"] == (low + high) / 2
    rows = read_records(tmp_path / "raw")
    # Offsets from the worker's start: the first arrival's scheduled time is start + its offset, so compare gaps
    # of scheduled times with the stage boundary found as the median of the two stages' counts.
    sched = sorted(float(r["scheduled"]) for r in rows)
    t0 = sched[0]
    counts = [sum(1 for t in sched if t0 + 0.5 <= t < t0 + 2.5), sum(1 for t in sched if t0 + 3.5 <= t < t0 + 5.5)]
    # Each a Poisson count over 2 s: 3σ bounds (false alarm 0.27 % each); the first arrival came ~1/low after start.
    for count, rate in zip(counts, (low, high), strict=True):
        assert abs(count - 2 * rate) <= 3 * math.sqrt(2 * rate), counts
