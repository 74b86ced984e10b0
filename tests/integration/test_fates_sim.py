"""The fate table end to end, on the simulator with its truth log (measure/fates.py).

- Cancellation by time cannot hide the tail: a slow variant whose requests are given up after 0.6 s reports an E2E
  p50 / p99 and a speedup against the fast baseline no better than the same run uncancelled (censored: unknown, never
  the fast survivors alone). The requests the report counts `cancelled_by_time` are exactly those the simulator saw
  aborted, and every request the raw shards hold is counted once by fate.
- The window is the requests sent (scheduled) in it: an open-loop burst during the warm-up builds a long queue at a
  two-slot server; requests of the burst that end inside the window stay out, and the report's TTFT is the window's
  requests' TTFT exactly (its count, and its p50 / p90 within the histogram's 0.1 %), which the simulator's own log
  confirms request by request (its first chunk written within the client's TTFT).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import hdr_rank_percentile, read_records, read_report, run_loadgen, write_scenario

_SLOW = {"slow": {"decode_base_ms": "30"}}  # ~3x the baseline's step: replies of 20-60 tokens take 0.6-1.8 s


def _run(tmp: Path, name: str, variants: dict[str, Any], **over: Any) -> dict[str, Any]:
    # Loose trust limits: these runs judge counts, censoring and window membership, which hold on a slow sitting.
    trust = {"loop_lag_p99_ms": 500, "cpu_percent_p90": 400, "schedule_slip_p99_ms": 500}
    scenario = write_scenario(
        tmp / f"{name}.yaml", variants, report_dir=str(tmp / f"report-{name}"), run_trust=trust, **over
    )
    proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp / f"raw-{name}"))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return {"report": read_report(tmp / f"report-{name}"), "records": read_records(tmp / f"raw-{name}")}


@pytest.fixture(scope="module")
def cancel_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("fates-cancel")
    truth_path = tmp / "truth.jsonl"
    with start_sim_process(["base=baseline", "slow=baseline"], truth_log=truth_path, profile_changes=_SLOW) as sim:
        variants = {"base": {"base_url": sim.base_url("base"), "baseline": True}, "slow": sim.base_url("slow")}
        load = {"users": 16, "duration": "5s", "warmup": 0}
        runs = {
            "whole": _run(tmp, "whole", variants, load=load),
            "cancelled": _run(
                tmp, "cancelled", variants, load=load, traffic={"cancel": {"share": 1.0, "after": ["0.6s", "0.6s"]}}
            ),
        }
        time.sleep(1.5)  # the simulator flushes its truth log every second
    runs["truth"] = load_truth(truth_path, variant="slow")
    return runs


def _variant(report: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in report["variants"] if v["name"] == name)


def test_cancelling_by_time_never_makes_the_slow_variant_look_better(cancel_runs: dict[str, Any]) -> None:
    whole, cancelled = (_variant(cancel_runs[k]["report"], "slow") for k in ("whole", "cancelled"))
    fates = cancelled["overall"]["fates"]
    assert fates.get("cancelled_by_time", 0) >= 10, fates  # the slow variant's long replies were given up
    for stat in ("p50", "p90", "p99"):
        before = whole["overall"]["metrics_ms"]["e2e"][stat]
        after = cancelled["overall"]["metrics_ms"]["e2e"][stat]
        assert before is not None  # uncancelled, every reply ended
        assert after is None or after >= before, (stat, before, after)  # censored, or no better
    for key, before in whole["speedup_vs_baseline"].items():
        after = cancelled["speedup_vs_baseline"].get(key)
        if key.startswith(("e2e", "tpot")) and before is not None:
            assert after is None or after <= before * 1.1, (key, before, after)
    # Uncancelled, the slow variant's E2E p99 is well past the cancel time: dropping the cancelled requests would
    # have reported one under 0.6 s.
    assert whole["overall"]["metrics_ms"]["e2e"]["p99"] > 600


def test_cancelled_requests_are_the_ones_the_simulator_saw_aborted(cancel_runs: dict[str, Any]) -> None:
    rows = [r for r in cancel_runs["cancelled"]["records"] if r["variant"] == "slow"]
    by_fate = _variant(cancel_runs["cancelled"]["report"], "slow")["overall"]["fates"]
    assert sum(by_fate.values()) == len(rows)  # every request the shards hold, counted once by fate
    assert Counter(r["fate"] for r in rows) == by_fate  # the same fate in the raw rows as in the report
    given_up = {r["id"] for r in rows if r["cancelled"] == "time"}
    assert len(given_up) == by_fate["cancelled_by_time"]
    truth = cancel_runs["truth"]
    aborted = {rid for rid, t in truth.items() if t.aborted and rid in {r["id"] for r in rows}}
    cut = {r["id"] for r in rows if r["cut_by_stop"]}
    assert given_up == aborted - cut
    for r in rows:
        if r["cancelled"] == "time":  # given up its drawn time after it started, never after its end
            assert r["done"] - r["sent"] == pytest.approx(0.6, abs=0.1)
            assert truth[r["id"]].finish is None or truth[r["id"]].aborted


@pytest.fixture(scope="module")
def warmup_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("fates-warmup")
    truth_path = tmp / "truth.jsonl"
    two_slots = {"base": {"max_num_seqs": "2"}}
    with start_sim_process(["base=baseline"], truth_log=truth_path, profile_changes=two_slots) as sim:
        run = _run(
            tmp,
            "warmup",
            {"base": sim.base_url("base")},
            load={
                "users": 32,
                "duration": "6s",
                "warmup": "2s",
                "arrival": {
                    "kind": "constant",
                    "stages": [{"duration": "2s", "rate": 12}, {"duration": "4s", "rate": 2}],
                },
            },
        )
        time.sleep(1.5)
    run["truth"] = load_truth(truth_path, variant="base")
    return run


def test_the_window_is_the_requests_sent_in_it(warmup_run: dict[str, Any]) -> None:
    rows = [r for r in warmup_run["records"] if not r["cut_by_stop"]]
    warm = [r for r in rows if r["warmup"]]
    window = [r for r in rows if not r["warmup"]]
    assert warm and window
    # Split by schedule: every warm-up arrival was due before every window arrival.
    assert max(r["scheduled"] for r in warm) < min(r["scheduled"] for r in window)
    # The burst queued: some of its requests ended inside the window, with the queue in their TTFT.
    window_start = min(r["scheduled"] for r in window)
    leaked = [r for r in warm if r["done"] > window_start]
    assert len(leaked) >= 3, len(leaked)
    overall = warmup_run["report"]["variants"][0]["overall"]
    assert overall["fates"].get("in_warmup", 0) >= len(warm)
    ttfts = sorted(r["ttft"] for r in window if r["ttft"] is not None)
    ttft = overall["metrics_ms"]["ttft"]
    assert ttft["count"] == len(ttfts) and len(ttfts) >= 5
    for stat, p in (("p50", 50.0), ("p90", 90.0)):
        assert ttft[stat] == pytest.approx(hdr_rank_percentile(ttfts, p) * 1e3, rel=2e-3), stat
    # The simulator's own clock: each window request's first chunk was written inside its client TTFT.
    truth = warmup_run["truth"]
    for r in window:
        t = truth[r["id"]]
        if r["ttft"] is None or not t.chunk_times:
            continue
        assert r["sent"] - 0.005 <= t.chunk_times[0] <= r["sent"] + r["ttft"] + 0.001, r["id"]


@pytest.fixture(scope="module")
def every_fate_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A run where requests end every way a closed-loop run can: succeeded, failed (HTTP 500), timed out (a 4 s
    stall past a 1.5 s request timeout), cut at the stop (no drain), sent in the warm-up."""
    tmp = tmp_path_factory.mktemp("fates-every")
    truth_path = tmp / "truth.jsonl"
    faults = {"base": {"error_rate": 0.15, "stall_rate": 0.15, "stall_s": 4.0}}
    with start_sim_process(["base=baseline"], truth_log=truth_path, faults=faults) as sim:
        run = _run(
            tmp,
            "every",
            {"base": {"base_url": sim.base_url("base"), "request_timeout": "1.5s"}},
            load={"users": 8, "duration": "6s", "warmup": "1s", "drain": 0},
        )
        time.sleep(1.5)
    run["truth"] = load_truth(truth_path, variant="base")
    return run


def test_every_fate_is_the_one_the_simulator_s_log_implies(every_fate_run: dict[str, Any]) -> None:
    rows, truth = every_fate_run["records"], every_fate_run["truth"]
    overall = every_fate_run["report"]["variants"][0]["overall"]
    assert Counter(r["fate"] for r in rows) == overall["fates"]  # the raw rows and the report agree, fate by fate
    for r in rows:
        faults = set(truth[r["id"]].faults)
        if r["warmup"]:
            want = "in_warmup"
        elif r["cut_by_stop"]:
            want = "cut_at_stop"
        elif "http_500" in faults:
            want = "failed"
        elif "stall" in faults:
            want = "timed_out"
        else:
            want = "succeeded"
        assert r["fate"] == want, (r["id"], faults, r["fate"])
        if want == "cut_at_stop":  # the server saw the client go: it had not ended it
            assert truth[r["id"]].aborted or truth[r["id"]].finish is None
    for fate in ("succeeded", "failed", "timed_out", "cut_at_stop", "in_warmup"):
        assert overall["fates"].get(fate, 0) >= 1, (fate, overall["fates"])
    assert overall["errors"] == {"http_5xx": overall["fates"]["failed"], "timeout": overall["fates"]["timed_out"]}
    # Each ended request of the window is a sample of E2E, measured or censored; the cut ones are censored too.
    e2e = overall["metrics_ms"]["e2e"]
    window = sum(n for f, n in overall["fates"].items() if f != "in_warmup")
    assert e2e["count"] + e2e["censored"] == window
    assert e2e["censored"] == window - overall["fates"]["succeeded"]
