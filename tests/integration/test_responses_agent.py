"""An agent on the Responses API against the simulator's truth log: agentic sessions (two turns, synthetic tools with
`tool_choice: required`) with `dialect: openai-responses`, as test_tools.py runs them on openai-chat.

Held: every first turn's reply is a function call (its `output_item.added` with the call's id and name, then its
argument deltas), timed like TTFT (the first argument delta's arrival against the simulator's write of it, within
the accuracy test's tolerances); every second turn sends that call back as a `function_call` input item with its
result as a `function_call_output` — the simulator refuses an output that answers no call made before it (400), and
logged each as answering the very call it made in the first turn; the calls' tokens are the simulator's.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import quantile, read_records, read_report, run_loadgen, write_scenario


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("responses-agent")
    truth_path = tmp / "truth.jsonl"
    agent = {"name": "short", "tools": {"functions": 2, "tool_choice": "required"}, "sessions": {"turns": 2}}
    with start_sim_process(["agent=baseline"], truth_log=truth_path) as sim:
        target = {"base_url": sim.base_url("agent"), "dialect": "openai-responses", "continuous_usage_stats": False}
        scenario = write_scenario(
            tmp / "agent.yaml", {"agent": target}, traffic={"mixes": [agent]}, load={"users": 4, "duration": "4s"}
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp / "raw"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        time.sleep(1.5)  # the simulator flushes its truth log every second
    return {
        "records": read_records(tmp / "raw"),
        "truth": load_truth(truth_path, variant="agent"),
        "report": read_report(tmp / "report"),
    }


def test_every_second_turn_sends_the_first_turns_call_back(agent_run: dict[str, Any]) -> None:
    truth = agent_run["truth"]
    done = [r for r in agent_run["records"] if r["error"] is None and not r["cut_by_stop"]]
    assert all(r["error"] is None for r in agent_run["records"] if not r["cut_by_stop"])  # no 400 from the server
    second = [r for r in done if r["turn"] == 2]
    assert len(second) >= 5
    for r in second:
        first = r["id"].removesuffix("-t2")
        assert truth[first].tool_call is not None
        assert truth[r["id"]].tool_result == "call_" + first
    assert all(truth[r["id"]].tool_result is None for r in done if r["turn"] == 1)


def test_the_calls_are_the_simulators_and_timed_like_ttft(agent_run: dict[str, Any]) -> None:
    truth = agent_run["truth"]
    errors: list[float] = []
    for r in agent_run["records"]:
        if r["error"] is not None or r["cut_by_stop"]:
            continue
        t = truth[r["id"]]
        assert t.tool_call is not None and r["finish_reason"] == "tool_calls", r["id"]
        assert r["tool_call_chunks"] == list(range(len(r["chunk_times"])))  # the whole reply is the call
        assert r["output_tokens"] == t.output_tokens
        errors.append(r["chunk_times"][0] - t.first_tool_call)
    abs_err = [abs(e) for e in errors]
    med, p99 = quantile(abs_err, 0.5), quantile(abs_err, 0.99)
    print(f"time to first tool call: n={len(abs_err)} median |err| {med * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms")
    assert len(errors) >= 10 and med <= 0.0002 and p99 <= 0.001
    assert min(errors) > -0.0005  # never before the simulator wrote it
    (variant,) = agent_run["report"]["variants"]
    assert variant["tool_calls"]["tool_calls"] == len(errors)
