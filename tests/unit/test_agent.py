"""Agent tasks (traffic/agent.py, config/agent.py): the drawn shape of a task, how its context grows, compaction,
sub-agents, and the config's refusals."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.config.agent import Agent
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import Scenario, parse_scenario
from loadgen.traffic.agent import AgentSession
from loadgen.traffic.sampler import RequestSampler, RequestSpec, sampler_for

_MIX = {"buckets": [{"name": "s", "prompt_tokens": [300, 600]}], "output_tokens": [20, 60], "system_prompt_tokens": 100}


def _scenario(agent: dict[str, Any] | None = None, **mix: Any) -> Scenario:
    doc = {
        "name": "t",
        "seed": 11,
        "variants": [{"name": "a", "base_url": "http://127.0.0.1:1", "model": "m"}],
        "traffic": {
            "mixes": [{"name": "work", **({"agent": agent} if agent is not None else {}), **mix}],
            "custom_mixes": {"work": _MIX},
        },
    }
    return Scenario.model_validate(doc)


def _walk(sampler: RequestSampler, agent: Agent, index: int, reply: str = "x y z") -> list[tuple[Any, ...]]:
    """A task's shape as the agent draws it, the replies all `reply`: per step (step, prompt tokens, max_tokens,
    tool wait, sub-agent paths and their steps)."""
    first = sampler.spec_at(index)
    session = AgentSession(sampler, agent, first)
    shape = []
    spec: RequestSpec | None = first
    while spec is not None:
        pause = session.after(reply, len(reply.split()))
        kids = [(c.first.branch, c.first.turns, c.first.prompt_tokens) for c in pause.children]
        shape.append((spec.turn, spec.prompt_tokens, spec.max_tokens, round(pause.wait_s, 9), kids))
        spec = session.next_step([(reply, 3)] * len(pause.children)) if not session.over else None
    return shape


def test_every_variant_gets_the_same_task_and_replies_shape_only_the_context() -> None:
    sc = _scenario({"steps": [3, 8], "subagents": {"share": 0.5}, "compaction": None})
    agent = sc.traffic.mixes[0].agent
    assert agent is not None
    one, two = sampler_for(sc, 3), sampler_for(sc, 3)
    for index in range(6):
        assert _walk(one, agent, index) == _walk(two, agent, index)
    # Longer replies grow the prompts, never the task's steps, waits or sub-agents.
    a, b = _walk(one, agent, 2), _walk(one, agent, 2, reply="a b c d e f g h")
    assert [(s[0], s[2], s[3], [k[:2] for k in s[4]]) for s in a] == [
        (s[0], s[2], s[3], [k[:2] for k in s[4]]) for s in b
    ]
    assert sum(s[1] for s in b) > sum(s[1] for s in a)
    # Another stream: other tasks.
    assert [_walk(sampler_for(sc, 4), agent, i) for i in range(4)] != [_walk(one, agent, i) for i in range(4)]


def test_steps_grow_by_the_reply_and_the_drawn_tool_results_and_answer_the_call() -> None:
    sc = _scenario({"steps": [4, 4], "tool_calls": [2, 2], "tool_result_tokens": [10, 30], "compaction": None})
    agent = sc.traffic.mixes[0].agent
    assert agent is not None
    sampler = sampler_for(sc, 0)
    first = sampler.spec_at(0)
    session = AgentSession(sampler, agent, first)
    assert first.turns == 4 and session.step == 1
    call = {"id": "call_1", "name": "tool_0", "arguments": '{"q": "a b"}'}
    pause = session.after("", 5, call)
    assert 0.2 <= pause.tool_s <= 4.0 and pause.think_s == 0.0 and not pause.children
    second = session.next_step()
    assert second is not None and second.messages is not None
    said, result = second.messages[-2], second.messages[-1]
    assert said["tool_calls"][0]["id"] == "call_1" and said["content"] is None
    assert result["role"] == "tool" and result["tool_call_id"] == "call_1"
    results = len(result["content"].split())
    assert 2 * 10 <= results <= 2 * 30
    # The target: the last prompt, the reply's tokens (a call's arguments), the results.
    assert second.prompt_tokens == first.prompt_tokens + 5 + results
    assert second.shared_prefix_tokens == first.prompt_tokens and second.turn == 2
    # A model that did not call: the same results, as a user message.
    session.after("plain words here", 3)
    third = session.next_step()
    assert third is not None and third.messages is not None
    assert third.messages[-2] == {"role": "assistant", "content": "plain words here"}
    assert third.messages[-1]["role"] == "user"
    assert third.prompt_tokens == second.prompt_tokens + 3 + len(third.messages[-1]["content"].split())
    session.after("done", 1)
    last = session.next_step()
    assert last is not None and last.turn == 4
    assert session.after("the answer", 2).wait_s == 0.0 and session.over and session.next_step() is None


def test_past_the_threshold_a_summary_replaces_the_history() -> None:
    compaction = {"threshold_tokens": 900, "summary_tokens": 150}
    sc = _scenario({"steps": [12, 12], "tool_result_tokens": [100, 200], "compaction": compaction})
    agent = sc.traffic.mixes[0].agent
    assert agent is not None
    sampler = sampler_for(sc, 0)
    session = AgentSession(sampler, agent, sampler.spec_at(1))
    prompts = [session.first.prompt_tokens]
    while not session.over:
        session.after("reply words", 2)
        spec = session.next_step()
        assert spec is not None and spec.messages is not None
        if session.compactions and spec.prompt_tokens < prompts[-1]:
            # Compacted: the system prompt, then the summary with this step's results; only the system is shared.
            assert [m["role"] for m in spec.messages] == ["system", "user"]
            results = len(spec.messages[1]["content"].split()) - 150
            assert spec.prompt_tokens == 100 + 150 + results
            assert spec.shared_prefix_tokens == 100
        prompts.append(spec.prompt_tokens)
    assert session.compactions >= 2
    assert max(prompts) <= 900 + 2 + 3 * 200  # never far past the threshold: compacted before it is passed


def test_sub_agents_open_with_the_parents_reply_and_nest_no_deeper_than_asked() -> None:
    subs = {"share": 1.0, "count": [2, 2], "steps": [2, 2], "task_tokens": [10, 10], "depth": 1}
    sc = _scenario({"steps": [3, 3], "subagents": subs, "compaction": None})
    agent = sc.traffic.mixes[0].agent
    assert agent is not None
    sampler = sampler_for(sc, 0)
    session = AgentSession(sampler, agent, sampler.spec_at(0))
    pause = session.after("the parent said this", 4)
    assert [c.first.branch for c in pause.children] == ["1", "2"]
    child = pause.children[0]
    assert child.first.prompt.startswith("the parent said this ")
    assert child.first.prompt_tokens == 100 + 4 + 10 and child.first.turns == 2
    assert child.first.shared_prefix_tokens == 100 and child.first.index == 0
    assert child.after("child reply", 2).children == []  # depth 1: a sub-agent spawns none
    spec = session.next_step([("one two", 2), ("three", 1)])
    assert spec is not None and spec.messages is not None
    assert spec.messages[-1]["content"].endswith("one two three")
    # The next step numbers its sub-agents on: 3 and 4.
    assert [c.first.branch for c in session.after("again", 1).children] == ["3", "4"]


@pytest.mark.parametrize(
    ("mix", "where", "expected"),
    [
        ({"agent": {}, "sessions": {"turns": 2}}, "traffic.mixes[0].agent", "not both"),
        ({"agent": {"tool_latency": [3, 1]}}, "traffic.mixes[0].agent.tool_latency", "min <= max"),
        (
            {"agent": {"compaction": {"threshold_tokens": 100, "summary_tokens": 100}}},
            "traffic.mixes[0].agent.compaction.summary_tokens",
            "below threshold_tokens",
        ),
        ({"agent": {"steps": [0, 3]}}, "traffic.mixes[0].agent.steps", ""),
    ],
)
def test_bad_agent_fields_are_named(mix: dict[str, Any], where: str, expected: str) -> None:
    mix_yaml = ", ".join(f"{k}: {v}" for k, v in mix.items()).replace("'", "")
    text = f"""
name: t
variants: [{{name: a, base_url: "http://127.0.0.1:1", model: m}}]
traffic:
  mixes: [{{name: chat, {mix_yaml}}}]
"""
    with pytest.raises(ConfigError) as e:
        parse_scenario(text, "s.yaml")
    assert any(i.path == where and expected in i.message for i in e.value.issues), e.value.issues


@pytest.mark.parametrize(
    ("mixes", "slo", "where", "expected"),
    [
        ("[{name: chat}]", "{metric: session_duration, stat: p95, max_ms: 600000}", "slos[0].metric", "no mix"),
        (
            "[{name: agent}, {name: chat}]",
            "{metric: session_duration, stat: p95, max_ms: 600000, mix: chat}",
            "slos[0].metric",
            "these are: ['agent']",
        ),
        (
            "[{name: agent}]",
            "{metric: session_duration, stat: p95, max_ms: 600000, class: fast}",
            "slos[0].class",
            "narrows to a mix",
        ),
        ("[{name: agent}]", "{metric: session_duration, max_ms: 600000}", "slos[0].stat", "needs a stat"),
    ],
)
def test_session_slos_name_what_they_judge(mixes: str, slo: str, where: str, expected: str) -> None:
    text = f"""
name: t
variants: [{{name: a, base_url: "http://127.0.0.1:1", model: m}}]
traffic: {{mixes: {mixes}}}
slos: [{slo}]
"""
    with pytest.raises(ConfigError) as e:
        parse_scenario(text, "s.yaml")
    assert any(i.path == where and expected in i.message for i in e.value.issues), e.value.issues


def test_the_agent_mix_is_sent_as_agent_tasks_unless_told_otherwise() -> None:
    sc = Scenario.model_validate(
        {
            "name": "t",
            "variants": [{"name": "a", "base_url": "http://127.0.0.1:1", "model": "m"}],
            "traffic": {"mixes": [{"name": "agent"}, {"name": "chat"}]},
        }
    )
    assert sc.traffic.mixes[0].agent == Agent() and sc.traffic.mixes[1].agent is None
    spec = next(s for s in (sampler_for(sc, 0).spec_at(i) for i in range(50)) if s.mix == "agent")
    assert spec.turn == 1 and 10 <= spec.turns <= 50
    off = Scenario.model_validate(
        {
            "name": "t",
            "variants": [{"name": "a", "base_url": "http://127.0.0.1:1", "model": "m"}],
            "traffic": {"mixes": [{"name": "agent", "agent": None}]},
        }
    )
    assert off.traffic.mixes[0].agent is None
