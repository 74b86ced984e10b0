"""Agentic traces replayed as agent tasks (traffic/trace_agent.py, `traffic.agent_trace`): each step's prompt its
recorded length, hash ids as shared text, the recorded gaps (capped), sub-agents where the sample has them holding
their parent's reply, the config's refusals and the preflight's exit 2 on a malformed file."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import Scenario, parse_scenario
from loadgen.preflight import parse_checked
from loadgen.traffic.agent_traces import read_agent_trace
from loadgen.traffic.request_spec import RequestSpec
from loadgen.traffic.sampler import RequestSampler, sampler_for
from loadgen.traffic.trace_agent import TraceAgentSession

TRACES = Path(str(resources.files("loadgen") / "examples" / "traces"))
WEKA = TRACES / "weka-agent-sample.jsonl"
OTEL = TRACES / "otel-agent-sample.jsonl"


def _doc(agent_trace: dict[str, Any], **traffic: Any) -> dict[str, Any]:
    return {
        "name": "t",
        "variants": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}],
        "traffic": {"agent_trace": agent_trace, **traffic},
        "load": {"users": 2, "duration": "5s"},
    }


def _scenario(path: Path = WEKA, **fields: Any) -> Scenario:
    return Scenario.model_validate(_doc({"path": str(path), **fields}))


def _run(sampler: RequestSampler, index: int, reply: str = "one two three") -> dict[str, list[tuple[Any, ...]]]:
    """The task request ``index`` opens, walked with every reply ``reply``: per agent path, per step
    (spec, pause). Sub-agents walked as the runner would start them."""
    first = sampler.spec_at(index)
    task = sampler.agent_task(first)
    assert isinstance(task, TraceAgentSession)
    out: dict[str, list[tuple[Any, ...]]] = {}
    todo: list[TraceAgentSession] = [task]
    while todo:
        agent = todo.pop(0)
        spec: RequestSpec | None = agent.first
        steps = out.setdefault(agent.first.branch, [])
        while spec is not None:
            pause = agent.after(reply, len(reply.split()))
            steps.append((spec, pause))
            todo += [c for c in pause.children if isinstance(c, TraceAgentSession)]
            spec = agent.next_step([]) if not agent.over else None
    return out


def _words(spec: RequestSpec) -> list[str]:
    return spec.prompt.split(" ")


def test_every_steps_prompt_is_its_recorded_length_and_max_tokens_its_output() -> None:
    sampler = sampler_for(_scenario(), 0)
    sessions = read_agent_trace(str(WEKA))
    for index, root in enumerate(sessions):
        task = _run(sampler, index)
        calls = {"": root.calls}
        for n, child in enumerate(root.children, start=1):
            calls[str(n)] = child.session.calls
        assert task.keys() == calls.keys()
        for branch, steps in task.items():
            assert [s.turn for s, _ in steps] == list(range(1, len(calls[branch]) + 1))
            for (spec, _), call in zip(steps, calls[branch], strict=True):
                assert spec.turns == len(calls[branch]) and spec.index == index and spec.branch == branch
                assert len(_words(spec)) == spec.prompt_tokens == call.input_tokens, (index, branch, spec.turn)
                assert spec.max_tokens == max(call.output_tokens, 1)


def test_equal_hash_ids_are_equal_text_and_scopes_keep_traces_apart() -> None:
    sampler = sampler_for(_scenario(), 0)
    fanout, linear = _run(sampler, 0), _run(sampler, 1)
    steps = [s for s, _ in fanout[""]]
    for before, spec in zip(steps, steps[1:], strict=False):
        # Each call's ids open with the previous call's: that whole prefix is the same text (its 64-token blocks).
        shared = spec.shared_prefix_tokens
        assert shared >= 15 * 64 and _words(spec)[:shared] == _words(before)[:shared]
        assert _words(spec)[shared] != _words(before)[shared]
    # Sub-agents share the parent's first two blocks (ids 1, 2: the system prompt), then differ.
    parent = fanout[""][1][0]
    for branch in ("1", "2"):
        child = fanout[branch][0][0]
        assert _words(child)[:128] == _words(parent)[:128] and child.shared_prefix_tokens == 128
        assert _words(child)[128:131] == ["one", "two", "three"]  # the parent's reply, after the shared blocks
    # The same ids in another conversation are other blocks.
    assert _words(linear[""][0][0])[:64] != _words(steps[0])[:64]


def test_a_childs_calls_hold_the_parents_reply_and_keep_their_length_unless_it_is_longer() -> None:
    sampler = sampler_for(_scenario(), 0)
    task = _run(sampler, 0, reply="alpha beta")
    for spec, _ in task["1"]:
        assert _words(spec)[128:130] == ["alpha", "beta"] and spec.prompt_tokens == len(_words(spec))
    # A reply longer than the child's recorded prompt leaves: the shared blocks and the whole reply, counted.
    long_reply = " ".join(["word"] * 500)
    task = _run(sampler, 0, reply=long_reply)
    first = task["1"][0][0]
    assert first.prompt_tokens == 128 + 500 == len(_words(first)) > 400
    assert task["1"][2][0].prompt_tokens == 1000  # later calls have room for it: their recorded length


def test_gaps_children_and_joins_are_the_samples() -> None:
    sampler = sampler_for(_scenario(max_gap="60s", timing="gaps"), 0)
    sessions = read_agent_trace(str(WEKA), max_gap_s=60)
    for index, root in enumerate(sessions):
        top = _run(sampler, index)[""]
        gaps = [round(p.tool_s, 6) for _, p in top]
        assert gaps == [round(c.gap_before_s, 6) for c in root.calls[1:]] + [0.0]
        assert all(p.think_s == 0 and p.join_first for _, p in top)
        spawned = [(k, p.joins) for k, (_, p) in enumerate(top) if p.children]
        expected: dict[int, list[int]] = {}
        for child in root.children:
            expected.setdefault(max(child.after_call, 0), []).append(child.join_before + 1)
        assert spawned == sorted(expected.items())
    # fanout: two sub-agents after call 1, joined before call 2 (step 3); the 301 s gap capped at 60 s.
    fanout = _run(sampler, 0)[""]
    assert fanout[1][1].joins == [3, 3] and fanout[3][1].tool_s == 60
    # background: one joined a call late (before step 3, not 2), one after the last call (at the task's end).
    background = _run(sampler, 2)[""]
    assert background[0][1].joins == [3] and background[2][1].joins == [4]


def test_the_gap_cap_and_no_cap() -> None:
    capped = _run(sampler_for(_scenario(max_gap="2s", timing="gaps"), 0), 0)[""]
    assert max(p.tool_s for _, p in capped) == 2
    uncapped = _run(sampler_for(_scenario(max_gap=None, timing="gaps"), 0), 0)[""]
    assert max(p.tool_s for _, p in uncapped) == 301


def test_streams_walk_the_sessions_open_loop_in_order_others_apart() -> None:
    sc = _scenario()
    ids = [sampler_for(sc, 0).spec_at(i).prompt_tokens for i in range(6)]
    assert ids == [1000, 600, 800] * 2
    assert sorted(sampler_for(sc, 5).spec_at(i).prompt_tokens for i in range(3)) == [600, 800, 1000]


def test_otel_sessions_replay_too_and_block_tokens_override() -> None:
    sampler = sampler_for(_scenario(OTEL), 0)
    task = _run(sampler, 0)
    assert [s.prompt_tokens for s, _ in task[""]] == [900, 1300, 1700]
    assert set(task) == {"", "1", "2"}
    sampler = sampler_for(_scenario(block_tokens=32), 0)
    steps = [s for s, _ in _run(sampler, 0)[""]]
    assert steps[1].shared_prefix_tokens == 15 * 32  # 15 ids of 32 tokens now


@pytest.mark.parametrize(
    ("traffic", "where", "what"),
    [
        ({"mixes": [{"name": "chat"}]}, "traffic.mixes", "only {name: agent-trace}"),
        ({"trace": {"path": "x.jsonl"}}, "traffic.agent_trace", "not both"),
        ({"mixes": [{"name": "agent-trace", "sessions": {"turns": [2, 3]}}]}, "traffic.mixes[0].sessions", "its own"),
        ({"agent_trace": {"path": "t", "name": "chat"}}, "traffic.agent_trace.name", "already a mix"),
        ({"agent_trace": {"path": "t", "max_gap": -1}}, "traffic.agent_trace.max_gap", "not be negative"),
        ({"agent_trace": {"path": "t", "block_tokens": 0}}, "traffic.agent_trace.block_tokens", "at least 1"),
    ],
)
def test_the_model_refuses_an_agent_trace_it_cannot_replay(traffic: dict[str, Any], where: str, what: str) -> None:
    doc = _doc({"path": str(WEKA)})
    doc["traffic"].update(traffic)
    with pytest.raises(ConfigError) as exc:
        parse_scenario(yaml.safe_dump(doc), "s.yaml")
    text = str(exc.value)
    assert where in text and what in text, text


def test_a_malformed_trace_is_refused_before_load_naming_file_line_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    good = WEKA.read_text(encoding="utf-8").splitlines()
    bad.write_text(good[0] + "\n" + good[1].replace('"in":600', '"in":-5') + "\n", encoding="utf-8")
    with pytest.raises(ConfigError) as exc:
        parse_checked(yaml.safe_dump(_doc({"path": str(bad)})), "s.yaml")
    text = str(exc.value)
    assert "traffic.agent_trace.path" in text and "bad.jsonl:2" in text and "in" in text, text
    assert parse_checked(yaml.safe_dump(_doc({"path": str(WEKA)})), "s.yaml").traffic.mixes[0].name == "agent-trace"
