"""Tools (`traffic.mixes[].tools`) against the simulator's truth log: one short run whose requests carry synthetic
tools with `tool_choice: auto` (the simulator answers about half of the prompts with a tool call) on a share of them.

What is held: the requests that carried tools are those the seeded draw names; loadgen saw a tool call in exactly
the replies the simulator made one; the time to the first tool call is the simulator's write of the first tool-call
piece within the TTFT accuracy test's tolerances (median |error| <= 0.2 ms, p99 <= 1 ms); a tool call's tokens are
the simulator's; a reply that only called a tool has no content TTFT; the report's share and counts are those.

A second short run on the same simulator sends agentic sessions (two turns, `tool_choice: required`): every second
turn sends the first turn's tool call back with its result (`role: tool`), and the simulator, which refuses a tool
result that answers no call made before it, logged each as answering the very call it made in the first turn.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from loadgen.config.tools import Tools, ToolsPlan
from loadgen.measure.records import RequestRecord
from loadgen.measure.tool_calls import tool_call_times
from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import quantile, read_records, read_report, run_loadgen, write_scenario

_TOOLS: dict[str, Any] = {"share": 0.8, "functions": 3, "tool_choice": "auto"}


@pytest.fixture(scope="module")
def tools_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("tools")
    truth_path = tmp / "truth.jsonl"
    agent = {"name": "short", "tools": {"functions": 2, "tool_choice": "required"}, "sessions": {"turns": 2}}
    with start_sim_process(["base=baseline", "agent=baseline"], truth_log=truth_path) as sim:
        scenario = write_scenario(
            tmp / "scenario.yaml",
            {"base": sim.base_url("base")},
            traffic={"mixes": [{"name": "short", "tools": _TOOLS}]},
            load={"users": 8, "duration": "4s", "warmup": 0},
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp / "raw"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        sessions = write_scenario(
            tmp / "agent.yaml",
            {"agent": sim.base_url("agent")},
            traffic={"mixes": [agent]},
            load={"users": 4, "duration": "3s", "warmup": 0},
            report_dir=str(tmp / "agent-report"),
        )
        proc = run_loadgen(sessions, "--workers", "0", "--raw-records", str(tmp / "agent-raw"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        time.sleep(1.5)  # the simulator flushes its truth log every second
    return {
        "records": read_records(tmp / "raw"),
        "truth": load_truth(truth_path, variant="base"),
        "report": read_report(tmp / "report"),
        "agent_records": read_records(tmp / "agent-raw"),
        "agent_truth": load_truth(truth_path, variant="agent"),
    }


def _done(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in run["records"] if r["error"] is None and not r["cut_by_stop"] and not r["warmup"]]


def test_the_seeded_share_carried_tools(tools_run: dict[str, Any]) -> None:
    plan = ToolsPlan({"short": Tools.model_validate(_TOOLS)}, 7)
    records = tools_run["records"]
    for r in records:
        _, stream, index = r["id"].rsplit("-", 2)
        assert r["carried_tools"] == (plan.draw("short", int(stream), int(index), 0) is not None), r["id"]
    carried = sum(r["carried_tools"] for r in records)
    assert 0.6 * len(records) < carried < len(records)


def test_tool_calls_are_the_simulators_and_timed_like_ttft(tools_run: dict[str, Any]) -> None:
    truth = tools_run["truth"]
    errors: list[float] = []
    calls = 0
    for r in _done(tools_run):
        t = truth[r["id"]]
        marks = r["tool_call_chunks"]
        assert (t.tool_call is not None) == bool(marks), r["id"]
        if t.tool_call is not None:
            assert r["carried_tools"]
        rec = RequestRecord.from_json(r)
        first_call, first_content, call_tokens = tool_call_times(rec)
        if not marks:
            assert first_call is None and first_content is not None
            continue
        calls += 1
        assert marks == list(range(len(r["chunk_times"])))  # the whole reply is the call
        assert first_content is None  # no content TTFT for a reply that only called a tool
        assert call_tokens == t.output_tokens == sum(r["chunk_tokens"])
        assert r["finish_reason"] == "tool_calls"
        errors.append(r["chunk_times"][marks[0]] - t.first_tool_call)
    assert calls >= 10
    abs_err = [abs(e) for e in errors]
    med, p99 = quantile(abs_err, 0.5), quantile(abs_err, 0.99)
    print(f"time to first tool call: n={len(abs_err)} median |err| {med * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms")
    assert med <= 0.0002 and p99 <= 0.001
    assert min(errors) > -0.0005  # never before the simulator wrote it


def test_the_report_gives_the_share_and_both_first_times(tools_run: dict[str, Any]) -> None:
    (variant,) = tools_run["report"]["variants"]
    x = variant["tool_calls"]
    done = [r for r in _done(tools_run) if r["carried_tools"]]
    calls = [r for r in done if r["tool_call_chunks"]]
    assert x["requests"] == len(done) and x["tool_calls"] == len(calls)
    assert x["tool_call_share"] == round(len(calls) / len(done), 4)
    assert x["tool_call_tokens"] == sum(sum(r["chunk_tokens"]) for r in calls)
    assert x["ttft_tool_call_ms"]["count"] == len(calls)
    assert x["content_replies"] == len(done) - len(calls) == x["ttft_content_ms"]["count"]
    assert set(x["mixes"]) == {"short"}


def test_an_agents_second_turn_sends_the_first_turns_call_back_with_its_result(tools_run: dict[str, Any]) -> None:
    truth = tools_run["agent_truth"]
    done = [r for r in tools_run["agent_records"] if r["error"] is None and not r["cut_by_stop"]]
    second = [r for r in done if r["turn"] == 2]
    assert len(second) >= 5
    for r in second:
        first = r["id"].removesuffix("-t2")
        assert truth[first].tool_call is not None  # the first turn's reply was a call (tool_choice: required)
        assert truth[r["id"]].tool_result == "call_" + first  # and the second sent that very call's result
        assert r["carried_tools"] and r["tool_call_chunks"]
    firsts = [r for r in done if r["turn"] == 1]
    assert all(truth[r["id"]].tool_result is None for r in firsts)
