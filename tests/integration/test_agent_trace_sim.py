"""The shipped Weka agentic sample replayed as agent tasks (`traffic.agent_trace`, `timing: gaps`; the recorded
clock, `offsets`: test_agent_trace_offsets.py) against the simulator's prefix-caching engine (decode sped up so whole
tasks fit in the run), gaps capped at 1 s. Held:
- every step's prompt is its recorded call's input length by the simulator's usage (a sub-agent's first step too:
  the parent's replies here are shorter than what its recorded prompt leaves), its max_tokens the recorded output;
- the agent waited each call's recorded gap (capped) after its previous step and the sub-agents joined before it,
  and sent it right after (no wait beyond it);
- every sub-agent ran after the parent's step it was recorded after and ended before the parent's step it is joined
  at (a sub-agent joined late stays out of the parent's next step; one joined at the end holds the task open);
- the repeated hash ids were served from the prefix cache (cached tokens > 0 at every later step, and at a
  sub-agent's first, which shares its parent's first two blocks);
- the report's sessions are the records' tasks, each with the fate its steps give it.
"""

from __future__ import annotations

import time
from collections import defaultdict
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from loadgen.config.scenario import load_scenario
from loadgen.sim.launch import start_sim_process
from loadgen.traffic.agent_graph import TraceSession
from loadgen.traffic.sampler import sampler_for
from loadgen.traffic.trace_agent import TraceAgentSession

from .harness import agent_tasks, read_records, read_report, run_loadgen, write_scenario

WEKA = Path(str(resources.files("loadgen") / "examples" / "traces" / "weka-agent-sample.jsonl"))
_CAP = 1.0
# Two shared cores: how late a step may go out after its gap, and timestamps' slack.
_LATE = 0.25
_EPS = 0.002


@pytest.fixture(scope="module")
def trace_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("agent-trace")
    with start_sim_process(["a=prefix-cache"], profile_changes={"a": {"decode_base_ms": "2"}}) as sim:
        scenario = write_scenario(
            tmp / "scenario.yaml",
            {"a": {"base_url": sim.base_url("a"), "exact_output": True}},
            traffic={
                "agent_trace": {"path": str(WEKA), "max_gap": f"{_CAP}s", "timing": "gaps"},
                "mixes": [{"name": "agent-trace"}],
                "custom_mixes": {},
            },
            load={"users": 6, "duration": "12s", "warmup": 0},
        )
        began = time.monotonic()
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp / "raw"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        print(f"run: {time.monotonic() - began:.1f} s")
    return {
        "scenario": load_scenario(scenario),
        "records": read_records(tmp / "raw"),
        "report": read_report(tmp / "report"),
    }


def _session(sc: Any, task: str, branch: str) -> TraceSession:
    """The recorded session a record's task and sub-agent path replay."""
    stream, index = (int(x) for x in task.split("-"))
    sampler = sampler_for(sc, stream)
    opened = sampler.agent_task(sampler.spec_at(index))
    assert isinstance(opened, TraceAgentSession)
    session = opened.session
    for n in branch.split(".") if branch else ():
        session = [c.session for c in session.children if c.session.calls][int(n) - 1]
    return session


def _done(r: dict[str, Any]) -> bool:
    return r["error"] is None and not r["cut_by_stop"] and r["done"] is not None


def test_every_step_is_its_recorded_call(trace_run: dict[str, Any]) -> None:
    sc, checked, children = trace_run["scenario"], 0, 0
    for (_, task), branches in agent_tasks(trace_run["records"]).items():
        for branch, steps in branches.items():
            session = _session(sc, task, branch)
            for step, r in steps.items():
                call = session.calls[step - 1]
                assert r["max_tokens"] == max(call.output_tokens, 1)
                if not _done(r):
                    continue
                assert r["prompt_tokens"] == r["prompt_tokens_target"] == call.input_tokens, (task, branch, step)
                assert r["output_tokens"] == call.output_tokens
                checked += 1
                children += bool(branch) and step == 1
    print(f"steps at their recorded length: {checked} ({children} sub-agents' first)")
    assert checked >= 30 and children >= 3


def test_gaps_are_waited_and_sub_agents_run_inside_their_parents_wait(trace_run: dict[str, Any]) -> None:
    sc = trace_run["scenario"]
    gaps: list[float] = []
    inside = late_join = 0
    for (_, task), branches in agent_tasks(trace_run["records"]).items():
        root = _session(sc, task, "")
        top = branches[""]
        kids = [c for c in root.children if c.session.calls]
        for n, child in enumerate(kids, start=1):
            steps = branches.get(str(n))
            if not steps:
                continue
            spawner = top[max(child.after_call, 0) + 1]
            assert steps[1]["sent"] >= spawner["done"] - _EPS, (task, n)
            joiner = top.get(child.join_before + 1)
            last = steps[max(steps)]
            if joiner is not None and _done(last) and max(steps) == len(child.session.calls):
                assert last["done"] <= joiner["sent"] + _EPS, (task, n)
                inside += 1
                late_join += child.join_before > child.after_call + 1
        for step in sorted(top):
            nxt = top.get(step + 1)
            if nxt is None or not _done(top[step]):
                continue
            # The gap runs from the later of the step's end and the joined sub-agents' ends.
            ready = top[step]["done"]
            for n, child in enumerate(kids, start=1):
                steps = branches.get(str(n), {})
                if child.join_before + 1 == step + 1 and steps:
                    ready = max(ready, steps[max(steps)]["done"] or ready)
            gap = root.calls[step].gap_before_s
            assert gap <= _CAP
            waited = nxt["sent"] - ready
            assert gap - _EPS <= waited <= gap + _LATE, (task, step, waited, gap)
            gaps.append(waited - gap)
    gaps.sort()
    print(
        f"gaps checked: {len(gaps)}; sent after the gap by p50 {gaps[len(gaps) // 2] * 1e3:.1f} ms, "
        f"max {gaps[-1] * 1e3:.1f} ms; sub-agents inside the wait {inside} (joined late {late_join})"
    )
    assert len(gaps) >= 15 and inside >= 3 and late_join >= 1


def test_repeated_hash_ids_are_served_from_the_prefix_cache(trace_run: dict[str, Any]) -> None:
    later = [r for r in trace_run["records"] if _done(r) and (r["turn"] >= 2 or "-b" in r["id"])]
    assert len(later) >= 20
    assert all((r["cached_prompt_tokens"] or 0) > 0 for r in later), [
        (r["id"], r["cached_prompt_tokens"]) for r in later if not r["cached_prompt_tokens"]
    ]
    cached = sum(r["cached_prompt_tokens"] for r in later) / sum(r["prompt_tokens"] for r in later)
    print(f"cached share of later steps' prompts: {cached:.2f}")


def test_the_reports_sessions_are_the_records_tasks(trace_run: dict[str, Any]) -> None:
    sc = trace_run["scenario"]
    expected: dict[str, int] = defaultdict(int)
    for (_, task), branches in agent_tasks(trace_run["records"]).items():
        records = [r for s in branches.values() for r in s.values()]
        root = _session(sc, task, "")
        every = sum(1 for s in root.walk() for _ in s.calls)
        if any(r["error"] is not None for r in records):
            expected["failed"] += 1
        elif any(r["cut_by_stop"] for r in records) or len(records) < every:
            expected["cut"] += 1
        else:
            expected["completed"] += 1
    s = next(v for v in trace_run["report"]["variants"] if v["name"] == "a")["sessions"]["agent-trace"]
    print(f"sessions: {dict(s['fates'])}")
    assert s["fates"] == dict(expected)
    assert s["completed"] >= 3 and s["per_session"]["subagents"] > 0
