"""Two deployments compared on agent tasks (the simulator): one with a prefix cache, one without, and a third that fails
a quarter of its requests.

Agent steps whose prompts are mostly the history the server has seen (a 1,500-token system prompt, results of a few
hundred tokens) and whose replies are short: a step's time is mostly its prefill, which the prefix cache saves.
Held, from the report's paired comparison of sessions (the cached variant the baseline):
- the uncached variant's tasks take longer: its session-duration speedup at p50 is below 1 with its interval;
- the failing variant's tasks fail mid-way (each step fails a quarter of the time), and its completed tasks are the
  short ones that happened to survive: dropped, its failures would make it look faster. They are censored: its p50
  falls among them, so it has no speedup (censored), and its session SLO fails.
"""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.sim.launch import start_sim_process

from .harness import read_report, run_loadgen, write_scenario

_AGENT: dict[str, Any] = {
    "steps": [3, 5],
    "tool_calls": [1, 1],
    "tool_result_tokens": [150, 300],
    "tool_latency": ["20ms", "40ms"],
    "output_tokens": [3, 6],
    "subagents": {"share": 0.0},
    "compaction": None,
}
_MIX = {
    "buckets": [{"name": "t", "prompt_tokens": [1800, 2200]}],
    "output_tokens": [3, 6],
    "system_prompt_tokens": 1500,
}


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("agent-compare")
    variants = ["cached=prefix-cache", "uncached=baseline", "failing=prefix-cache"]
    with start_sim_process(variants, faults={"failing": {"error_rate": 0.25}}) as sim:
        scenario = write_scenario(
            tmp / "scenario.yaml",
            {
                "cached": {"base_url": sim.base_url("cached"), "baseline": True},
                "uncached": sim.base_url("uncached"),
                "failing": sim.base_url("failing"),
            },
            traffic={"mixes": [{"name": "task", "agent": _AGENT}], "custom_mixes": {"task": _MIX}},
            load={"users": 12, "duration": "10s", "warmup": "1s", "drain": "15s"},
            slos=[{"metric": "session_duration", "stat": "p50", "max_ms": 30000}],
        )
        proc = run_loadgen(scenario, "--workers", "0")
        assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return read_report(tmp / "report")


def _entry(report: dict[str, Any], variant: str, stat: str) -> dict[str, Any]:
    return next(e for e in report["session_comparison"] if e["variant"] == variant and e["stat"] == stat)


def test_the_cache_makes_agent_tasks_faster_with_an_interval(compared: dict[str, Any]) -> None:
    sessions = {v["name"]: v["sessions"]["task"] for v in compared["variants"]}
    assert sessions["cached"]["completed"] >= 10 and sessions["uncached"]["completed"] >= 5, sessions
    assert sessions["cached"]["cached_share"] > 0.5  # the history served from the cache
    p50 = _entry(compared, "uncached", "p50")
    assert p50["speedup"] is not None and p50["speedup"] < 1.0 and p50["ci_high"] < 1.0, p50


def test_a_variant_whose_tasks_fail_mid_way_cannot_look_faster(compared: dict[str, Any]) -> None:
    failing = next(v for v in compared["variants"] if v["name"] == "failing")["sessions"]["task"]
    assert failing["fates"].get("failed", 0) > failing["completed"], failing["fates"]
    p50 = _entry(compared, "failing", "p50")
    assert p50["speedup"] is None and p50["censored"] is True, p50
    slo = next(s for s in compared["slos"] if s["variant"] == "failing" and s["metric"] == "session_duration")
    assert slo["passed"] is False and slo["censored"] is True, slo
