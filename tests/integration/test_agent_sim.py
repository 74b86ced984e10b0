"""Agent tasks (`traffic.mixes[].agent`) against the simulator, judged against the seeded draws and the records.

One run of two identical variants on the same seeded tasks (prose text, no tools, so every prompt's length is exact
on a server that bills words), short steps and tool waits, sub-agents on 40 % of the steps, a low compaction
threshold. Held:
- every step's prompt is its target to the token by the simulator's usage (the context: system, task, replies,
  drawn results, sub-agents' final replies, the summary after a compaction);
- the agent waited its drawn tool latency between two steps, and every sub-agent ran inside its parent's wait: its
  first step after the parent's step ended, its last before the parent's next one was sent;
- some prompt shrank at a compaction, and its cached tokens dropped to the system prompt (the prefix-cache profile);
- the two variants ran the same tasks: a task completed on both has the same steps and sub-agents on both;
- the report's sessions are the records' tasks, each with the fate its steps give it (opened in the warm-up, failed,
  cut by the stop, completed), the cut ones censored in the duration, and its duration percentiles the records'
  (first step sent to last step ended) by the histogram's rank rule;
and a second short run with tools (`tool_choice: required`): every step after a call answers it (the simulator
refuses a tool result that answers no call made before it), and all of them succeed.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any

import pytest

from loadgen.config.scenario import load_scenario
from loadgen.sim.launch import start_sim_process
from loadgen.traffic.agent import _between
from loadgen.traffic.sampler import sampler_for

from .harness import agent_tasks, read_records, read_report, run_loadgen, write_scenario

_AGENT: dict[str, Any] = {
    "steps": [3, 5],
    "tool_calls": [1, 2],
    "tool_result_tokens": [20, 60],
    "tool_latency": ["0.15s", "0.4s"],
    "output_tokens": [5, 15],
    "subagents": {"share": 0.4, "count": [1, 2], "steps": [2, 3], "task_tokens": [10, 30]},
    "compaction": {"threshold_tokens": 450, "summary_tokens": 100},
}
_MIX = {
    "buckets": [{"name": "t", "prompt_tokens": [200, 320]}],
    "output_tokens": [5, 15],
    "system_prompt_tokens": 60,
}


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("agent")
    # Two identical engines with a prefix cache: their cached tokens say what a compaction does to the cache.
    with start_sim_process(["a=prefix-cache", "b=prefix-cache", "tools=baseline"]) as sim:
        scenario = write_scenario(
            tmp / "scenario.yaml",
            {"a": sim.base_url("a"), "b": sim.base_url("b")},
            traffic={"mixes": [{"name": "task", "agent": _AGENT}], "custom_mixes": {"task": _MIX}},
            # No drain: every task under way at the stop is cut there (a short drain let all three of a variant's
            # tasks end in it now and then, and the run had no cut task to count).
            load={"users": 6, "duration": "9s", "warmup": "1s", "drain": 0},
            slos=[
                {"metric": "session_duration", "stat": "p50", "max_ms": 60000},
                {"metric": "success_rate", "min_percent": 99},
            ],
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp / "raw"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        tools = write_scenario(
            tmp / "tools.yaml",
            {"tools": sim.base_url("tools")},
            traffic={
                "mixes": [{"name": "task", "agent": _AGENT, "tools": {"functions": 2, "tool_choice": "required"}}],
                "custom_mixes": {"task": _MIX},
            },
            load={"users": 3, "duration": "4s", "warmup": 0},
            report_dir=str(tmp / "tools-report"),
        )
        proc = run_loadgen(tools, "--workers", "0", "--raw-records", str(tmp / "tools-raw"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        time.sleep(0.2)
    return {
        "scenario": load_scenario(scenario),
        "records": read_records(tmp / "raw"),
        "report": read_report(tmp / "report"),
        "tool_records": read_records(tmp / "tools-raw"),
        "tool_report": read_report(tmp / "tools-report"),
    }


def test_every_steps_prompt_is_its_target_by_the_servers_count(agent_run: dict[str, Any]) -> None:
    done = [r for r in agent_run["records"] if r["error"] is None and not r["cut_by_stop"]]
    assert len(done) > 60
    assert [r["prompt_tokens"] - r["prompt_tokens_target"] for r in done] == [0] * len(done)
    assert sum(1 for r in done if "-b" in r["id"]) > 5  # sub-agents' steps among them
    assert max(r["turn"] for r in done) >= 3


def test_the_agent_waits_its_tools_and_sub_agents_run_inside_the_wait(agent_run: dict[str, Any]) -> None:
    sampler_of: dict[int, Any] = {}
    sc = agent_run["scenario"]
    lo, hi = sc.traffic.mixes[0].agent.tool_latency
    checked = joined = 0
    for (_, task), branches in agent_tasks(agent_run["records"]).items():
        stream, index = (int(x) for x in task.split("-"))
        sampler = sampler_of.setdefault(stream, sampler_for(sc, stream))
        top = branches[""]
        for step in sorted(top):
            nxt = top.get(step + 1)
            if nxt is None:
                continue
            drawn = _between(sampler.agent_draws(index, "", step)[1], lo, hi)
            gap = nxt["sent"] - top[step]["done"]
            assert gap >= drawn - 0.002, (task, step, gap, drawn)
            checked += 1
        for branch, steps in branches.items():
            if not branch:
                continue
            # Spawned after the parent's step that drew it, joined before the parent's next step.
            parents = [s for s in sorted(top) if top[s]["done"] <= steps[1]["sent"] + 1e-6]
            assert parents, (task, branch)
            after = top.get(parents[-1] + 1)
            last = steps[max(steps)]
            if after is not None and last["done"] is not None and last["error"] is None:
                assert last["done"] <= after["sent"] + 1e-6, (task, branch)
                joined += 1
    assert checked > 30 and joined > 3


def test_a_compaction_shrinks_the_prompt_to_the_summary_and_drops_its_cache_hit(agent_run: dict[str, Any]) -> None:
    shrunk = dropped = 0
    for (_, _), branches in agent_tasks(agent_run["records"]).items():
        top = branches[""]
        for step in sorted(top)[1:]:
            prev, cur = top[step - 1], top[step]
            if cur["prompt_tokens_target"] < prev["prompt_tokens_target"]:
                # The system prompt, the 100-token summary, and the step's results: nothing else of the history.
                assert cur["shared_prefix_tokens"] == 60
                assert cur["prompt_tokens_target"] <= 60 + 100 + 2 * 60 + 2 * 15 * 3
                # Its cache hit drops to the system prompt at most, from the history the step before reused.
                if cur["cached_prompt_tokens"] is not None and prev["cached_prompt_tokens"] is not None:
                    assert cur["cached_prompt_tokens"] <= 60 < prev["cached_prompt_tokens"], (cur["id"], prev["id"])
                    dropped += 1
                shrunk += 1
    assert shrunk >= 3 and dropped >= 2


def test_both_variants_ran_the_same_tasks(agent_run: dict[str, Any]) -> None:
    tasks = agent_tasks(agent_run["records"])
    both = 0
    for (variant, task), branches in tasks.items():
        if variant != "a" or ("b", task) not in tasks:
            continue
        other = tasks[("b", task)]
        done_a = all(r["error"] is None and not r["cut_by_stop"] for s in branches.values() for r in s.values())
        done_b = all(r["error"] is None and not r["cut_by_stop"] for s in other.values() for r in s.values())
        if done_a and done_b and branches[""].keys() == other[""].keys():
            # Same steps, same sub-agents with the same steps, the same max_tokens at each.
            shape = {b: {t: r["max_tokens"] for t, r in s.items()} for b, s in branches.items()}
            assert shape == {b: {t: r["max_tokens"] for t, r in s.items()} for b, s in other.items()}, task
            both += 1
    assert both >= 5


def test_the_reports_sessions_are_the_records_tasks_each_with_its_fate(agent_run: dict[str, Any]) -> None:
    sc = agent_run["scenario"]
    expected: dict[str, dict[str, int]] = {"a": defaultdict(int), "b": defaultdict(int)}
    for (variant, task), branches in agent_tasks(agent_run["records"]).items():
        stream, index = (int(x) for x in task.split("-"))
        steps = sampler_for(sc, stream).spec_at(index).turns
        records = [r for s in branches.values() for r in s.values()]
        top = branches[""]
        if top[1]["warmup"]:
            fate = "in_warmup"
        elif any(r["error"] is not None for r in records):
            fate = "failed"
        elif any(r["cut_by_stop"] for r in records) or max(top) < steps:
            fate = "cut"
        else:
            fate = "completed"
        expected[variant][fate] += 1
    for v in agent_run["report"]["variants"]:
        s = v["sessions"]["task"]
        assert s["fates"] == dict(expected[v["name"]]), v["name"]
        assert s["fates"].get("cut", 0) >= 1  # the stop found tasks mid-way: counted, not dropped
        assert s["duration_ms"]["censored"] == s["fates"].get("cut", 0) + s["fates"].get("failed", 0)
        assert s["duration_ms"]["count"] == s["completed"] == s["fates"]["completed"]
        assert s["per_session"]["steps"] >= 3 and s["per_session"]["subagents"] > 0
        shares = s["time_share"]
        assert abs(shares["model"] + shares["tools"] + shares["subagents"] - 1) < 0.01
        assert shares["tools"] > 0.1  # 0.15-0.4 s of tools per step against steps of tens of milliseconds


def test_the_reports_session_durations_are_the_records(agent_run: dict[str, Any]) -> None:
    """A completed task's duration: its first step sent to its last step's end (sub-agents join before it)."""
    sc = agent_run["scenario"]
    durations: dict[str, list[float]] = defaultdict(list)
    for (variant, task), branches in agent_tasks(agent_run["records"]).items():
        stream, index = (int(x) for x in task.split("-"))
        records = [r for s in branches.values() for r in s.values()]
        top = branches[""]
        steps = sampler_for(sc, stream).spec_at(index).turns
        if top[1]["warmup"] or max(top) < steps or any(r["error"] or r["cut_by_stop"] for r in records):
            continue
        assert max(r["done"] for r in records) == top[steps]["done"], task
        durations[variant].append((top[steps]["done"] - top[1]["sent"]) * 1e3)
    for v in agent_run["report"]["variants"]:
        got = v["sessions"]["task"]["duration_ms"]
        assert got["count"] == len(durations[v["name"]])
        measured = sorted(durations[v["name"]])
        total = len(measured) + got.get("censored", 0)  # the cut tasks rank above every completed one
        for stat, p in (("p50", 50.0), ("p90", 90.0), ("p99", 99.0)):
            rank = max(int(p * total / 100 + 0.5), 1)
            if rank > len(measured):  # the rank falls among the cut tasks: unknown, censored
                assert got[stat] is None, (v["name"], stat)
                continue
            want = measured[rank - 1]
            assert abs(got[stat] - want) <= 0.002 * want + 0.01, (v["name"], stat, got[stat], want)


def test_a_session_slo_is_judged_on_the_sessions_censored_ones_included(agent_run: dict[str, Any]) -> None:
    report = agent_run["report"]
    judged = {s["variant"]: s for s in report["slos"] if s["metric"] == "session_duration"}
    assert set(judged) == {"a", "b"}
    for v in report["variants"]:
        s, slo = v["sessions"]["task"], judged[v["name"]]
        assert slo["observed_ms"] == s["duration_ms"]["p50"] and slo["passed"] is True
        # Every cut or failed session is over any bound: not known to have ended in time.
        assert slo["breaching_sessions"] == s["duration_ms"]["censored"] >= 1


def test_two_identical_engines_session_durations_compare_within_noise(agent_run: dict[str, Any]) -> None:
    entries = {e["stat"]: e for e in agent_run["report"]["session_comparison"]}
    p50 = entries["p50"]
    assert p50["variant"] == "b" and p50["baseline"] == "a" and p50["metric"] == "session_duration"
    assert p50["speedup"] is not None and p50["ci_low"] <= 1.0 <= p50["ci_high"], p50


def test_with_tools_every_step_after_a_call_answers_it_and_the_drain_lets_tasks_end(agent_run: dict[str, Any]) -> None:
    # The default drain (30 s): the tasks under way at the stop go on, their later steps sent in the drain, and end.
    sessions = agent_run["tool_report"]["variants"][0]["sessions"]["task"]
    assert set(sessions["fates"]) == {"completed"} and sessions["completed"] >= 3, sessions["fates"]
    assert sessions["duration_ms"].get("censored", 0) == 0
    records = agent_run["tool_records"]
    assert any(r["fate"] == "drained" for r in records)
    assert records and all(r["error"] is None for r in records), [r["error_detail"] for r in records][:3]
    assert sum(r["finish_reason"] == "tool_calls" for r in records) >= len(records) / 2
    assert max(r["turn"] for r in records) >= 2
