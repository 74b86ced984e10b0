"""Requests the client gives up (`traffic.cancel`) against the simulator's truth log: one simulator, two short runs,
one giving requests up after a drawn count of tokens (`counted`), one after a drawn time (`timed`).

What is held: the requests loadgen counts `cancelled` are exactly those the simulator saw aborted (its requests cut
at the run's stop aside); each was given up with the read that reached its drawn count (the baseline profile
streams a token per chunk), and the simulator had written at most one chunk more than loadgen received when it saw
the connection go (it writes every ~10 ms engine step, and sees the client's FIN at once: 0 seen); a timed one was
given up its drawn time after it started (0-50 ms late: two busy cores), and the simulator saw the connection go
within a ms. The report counts them apart from successes and errors, and the simulator's /metrics counts the
aborts (vLLM's finished_reason="abort").
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from loadgen.config.cancel import Cancel, CancelPlan
from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import read_records, read_report, run_loadgen, write_scenario

_SEED = 7  # write_scenario's


def _run(tmp: Path, url: str, name: str, cancel: dict[str, Any]) -> dict[str, Any]:
    scenario = write_scenario(
        tmp / f"{name}.yaml",
        {name: url},
        traffic={"cancel": cancel},
        load={"users": 4, "duration": "4s", "warmup": 0},
        report_dir=str(tmp / f"report-{name}"),
    )
    proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp / f"raw-{name}"))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return {"report": read_report(tmp / f"report-{name}"), "records": read_records(tmp / f"raw-{name}")}


@pytest.fixture(scope="module")
def cancel_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("cancel")
    truth_path = tmp / "truth.jsonl"
    with start_sim_process(["base=baseline"], truth_log=truth_path) as sim:
        url = sim.base_url("base")
        runs = {
            "counted": _run(tmp, url, "counted", {"share": 0.4, "after_tokens": [3, 15]}),
            "timed": _run(tmp, url, "timed", {"share": 0.4, "after": ["50ms", "250ms"]}),
        }
        time.sleep(1.5)  # the simulator flushes its truth log every second
        with urllib.request.urlopen(url + "/metrics", timeout=10) as resp:
            metrics = resp.read().decode()
    runs["truth"] = load_truth(truth_path, variant="base")
    runs["aborts_metric"] = float(re.search(r'vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\} (\S+)',
                                            metrics).group(1))  # fmt: skip
    return runs


def _given_up_and_aborted(runs: dict[str, Any], name: str) -> tuple[list[dict[str, Any]], set[str]]:
    records = runs[name]["records"]
    mine = {r["id"] for r in records}
    aborted = {rid for rid, t in runs["truth"].items() if t.aborted and rid in mine}
    cut = {r["id"] for r in records if r["cut_by_stop"]}
    given_up = [r for r in records if r["cancelled"]]
    assert {r["id"] for r in given_up} == aborted - cut
    assert all(r["error"] is None and not r["cut_by_stop"] for r in given_up)
    return given_up, aborted


def _drawn(plan: CancelPlan, rid: str) -> tuple[str, Any] | None:
    _, stream, index = rid.rsplit("-", 2)
    return plan.draw(int(stream), int(index), 0)


def test_given_up_at_the_drawn_count_as_the_simulator_saw_it(cancel_runs: dict[str, Any]) -> None:
    given_up, _ = _given_up_and_aborted(cancel_runs, "counted")
    plan = CancelPlan(Cancel(share=0.4, after_tokens=(3, 15)), _SEED)
    assert len(given_up) >= 5
    extra = []
    for r in given_up:
        kind, n = _drawn(plan, r["id"])  # type: ignore[misc]
        received, times = sum(r["chunk_tokens"]), r["chunk_times"]
        # Given up with the read that reached the count: what came after it in that read came with it.
        reached = next(k for k in range(len(times)) if sum(r["chunk_tokens"][: k + 1]) >= n)
        assert kind == "tokens" and received >= n and set(times[reached:]) == {r["done"]}, (r["id"], n, times)
        t = cancel_runs["truth"][r["id"]]
        extra.append(t.output_tokens - received)
        assert 0 <= t.output_tokens - received <= max(t.chunk_tokens), (r["id"], received, t.chunk_tokens)
        assert r["ttft"] is not None and r["e2e"] is not None
    print("tokens the simulator wrote after the chunk that reached the count:", sorted(extra))
    finished = [r for r in cancel_runs["counted"]["records"] if not r["cancelled"] and not r["cut_by_stop"]]
    for r in finished:  # let finish: not drawn, or drawn past its length
        drawn = _drawn(plan, r["id"])
        assert r["error"] is None and (drawn is None or drawn[1] >= r["max_tokens"]), r["id"]


def test_given_up_at_the_drawn_time_as_the_simulator_saw_it(cancel_runs: dict[str, Any]) -> None:
    given_up, _ = _given_up_and_aborted(cancel_runs, "timed")
    plan = CancelPlan(Cancel(share=0.4, after=(0.05, 0.25)), _SEED)
    assert len(given_up) >= 5
    for r in given_up:
        kind, seconds = _drawn(plan, r["id"])  # type: ignore[misc]
        t = cancel_runs["truth"][r["id"]]
        late = r["done"] - r["sent"] - seconds
        assert kind == "seconds" and -0.01 <= late <= 0.05, (r["id"], seconds, late)
        # The connection closes as the timer's exception leaves it, a few µs before loadgen stamps `done`.
        assert t.finish is not None and -0.001 <= t.finish - r["done"] <= 0.05, (r["id"], t.finish - r["done"])


def test_the_report_and_the_servers_metrics_count_them(cancel_runs: dict[str, Any]) -> None:
    aborted_total = 0
    for name in ("counted", "timed"):
        given_up, aborted = _given_up_and_aborted(cancel_runs, name)
        aborted_total += len(aborted)
        overall = cancel_runs[name]["report"]["variants"][0]["overall"]
        ok = [r for r in cancel_runs[name]["records"] if r["error"] is None and not r["cancelled"]]
        ok = [r for r in ok if not r["cut_by_stop"]]
        assert overall["cancelled"] == len(given_up) and overall["ok"] == len(ok) == overall["requests"]
        assert overall["metrics_ms"]["e2e"]["count"] == len(ok)  # given-up requests are in no E2E
        with_token = sum(1 for r in given_up if r["chunk_times"])
        assert overall["metrics_ms"]["ttft"]["count"] == len(ok) + with_token
    assert cancel_runs["aborts_metric"] == aborted_total
