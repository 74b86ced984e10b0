"""A reasoning model's phases (measure/reasoning.py): which chunks the accumulator marks as thinking, the per-request
times, counts and TPOTs, and what a group keeps of them."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from loadgen.measure.aggregate import Aggregate, GroupStats
from loadgen.measure.reasoning import reasoning_phases
from loadgen.measure.records import RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect


def _event(delta: dict[str, object], n: int | None = None) -> bytes:
    obj: dict[str, object] = {"choices": [{"index": 0, "delta": delta}]}
    if n is not None:
        obj["usage"] = {"completion_tokens": n}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _stream(events: list[tuple[float, bytes]], sent: float = 100.0) -> RequestRecord:
    rec = RequestRecord("r", "v", "chat")
    acc = StreamAccumulator(rec, get_dialect("openai-chat"))
    acc.on_sent(sent)
    for t, data in events:
        acc.feed(t, data)
    acc.feed(events[-1][0], b"data: [DONE]\n\n")
    return acc.finish(events[-1][0])


def test_thinking_then_answer_with_cumulative_counts() -> None:
    # vLLM with a reasoning parser and continuous usage: 5 reasoning tokens over 3 chunks, then 4 answer tokens.
    rec = _stream(
        [
            (100.0, _event({"role": "assistant", "content": ""}, 0)),
            (100.2, _event({"reasoning_content": "Let"}, 1)),
            (100.3, _event({"reasoning_content": " me see"}, 3)),
            (100.4, _event({"reasoning": " ok"}, 5)),  # vLLM's newer field name
            (100.9, _event({"content": "It", "reasoning_content": None}, 6)),
            (101.1, _event({"content": " is four."}, 9)),
        ]
    )
    assert list(rec.reasoning_chunks or ()) == [0, 1, 2]
    p = reasoning_phases(rec)
    assert p is not None and not p.from_server
    assert p.ttft_reasoning == pytest.approx(0.2) and rec.ttft == pytest.approx(0.2)  # TTFT: either kind
    assert p.ttft_answer == pytest.approx(0.9)
    assert (p.reasoning_tokens, p.answer_tokens) == (5, 4)
    assert p.tpot_reasoning == pytest.approx(0.2 / 4)  # (100.4 − 100.2) over the 4 tokens after the first chunk
    assert p.tpot_answer == pytest.approx(0.2 / 3)


def test_one_per_chunk_and_a_chunk_of_both_is_the_answers() -> None:
    rec = _stream(
        [
            (10.1, _event({"reasoning_content": "a"})),
            (10.2, _event({"reasoning_content": "b"})),
            (10.5, _event({"reasoning_content": "c", "content": "X"})),  # the boundary: thoughts end, answer begins
            (10.6, _event({"content": "Y"})),
        ],
        sent=10.0,
    )
    p = reasoning_phases(rec)
    assert p is not None
    assert p.ttft_answer == pytest.approx(0.5) and (p.reasoning_tokens, p.answer_tokens) == (2, 2)
    assert p.tpot_reasoning == pytest.approx(0.1) and p.tpot_answer == pytest.approx(0.1)


def test_the_servers_reasoning_count_wins_and_hidden_thinking_counts_tokens_only() -> None:
    usage = {"prompt_tokens": 5, "completion_tokens": 30, "completion_tokens_details": {"reasoning_tokens": 24}}
    final = b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n"
    # OpenAI's o-series: no thinking streamed, only the count.
    rec = _stream([(1.5, _event({"content": "Four"})), (1.7, _event({"content": "."})), (1.8, final)], sent=1.0)
    assert rec.reasoning_tokens == 24 and rec.reasoning_chunks is None
    p = reasoning_phases(rec)
    assert p is not None and p.from_server
    assert (p.reasoning_tokens, p.answer_tokens) == (24, 6)
    assert p.ttft_reasoning is None and p.ttft_answer == pytest.approx(0.5)


def test_no_reasoning_is_no_phases_and_adds_nothing() -> None:
    rec = _stream([(1.5, _event({"content": "Four"})), (1.7, _event({"content": "."}))], sent=1.0)
    assert reasoning_phases(rec) is None
    g = GroupStats()
    g.add(rec)
    assert g.reasoning == {} and not any(m.startswith(("ttft_", "tpot_")) for m in g.hists)


def test_a_group_keeps_the_phases_and_they_merge_over_the_wire() -> None:
    def rec(rid: str, ok: bool = True) -> RequestRecord:
        r = _stream([(0.2, _event({"reasoning_content": "a"}, 2)), (0.6, _event({"content": "b"}, 3))], sent=0.0)
        r.request_id = rid
        if not ok:
            r.error = "stream_interrupted"
        return r

    worker = Aggregate()
    for i in range(3):
        worker.add(rec(f"r{i}"), 1000.0)
    worker.add(rec("failed", ok=False), 1000.0)  # a failed request adds no phases
    master = Aggregate()
    master.merge_wire(worker.pop_delta())
    g = master.groups[("v", "chat")]
    assert g.reasoning == {"requests": 3, "reasoning_tokens": 6, "answer_tokens": 3}
    assert g.hists["ttft_reasoning"].count == 3 and g.hists["ttft_answer"].count == 3
    assert g.hists["ttft_answer"].summary_ms()["p50"] == pytest.approx(600, rel=0.01)
    assert "tpot_reasoning" not in g.hists  # one chunk per phase: no time between tokens within it


def _sim_events(reasoning_tokens: int, steps: list[int]) -> list[tuple[Any, int]]:
    """The simulator's OpenAI chat events for engine steps of `steps` tokens, with cumulative usage."""
    from types import SimpleNamespace

    from loadgen.sim.framings import FRAMINGS, SimRequest

    req = SimRequest(["w"] * 4, sum(steps), True, "m", include_usage=True, continuous=True)
    s = SimpleNamespace(
        rid="r", req=req, created=0, vocab_offset=0, perturbed=frozenset(), reasoning_tokens=reasoning_tokens,
        prompt_tokens=4, cached_tokens=0,
    )  # fmt: skip
    framing, start = FRAMINGS["/v1/chat/completions"], 0
    out: list[tuple[Any, int]] = []
    for i, n in enumerate(steps):
        for data, k in framing.tokens(s, start, n, final=i == len(steps) - 1):
            out.append((orjson.loads(data.removeprefix(b"data: ")), k))
        start += n
    return out


def test_the_simulator_splits_a_step_across_the_boundary_and_the_client_reads_it_back() -> None:
    events = _sim_events(5, [3, 3, 3])  # tokens 0-2 thinking, 3-4 thinking then 5 answer, 6-8 answer
    kinds = [("reasoning" if e["choices"][0]["delta"].get("reasoning_content") else "answer", k) for e, k in events]
    assert kinds == [("reasoning", 3), ("reasoning", 2), ("answer", 1), ("answer", 3)]
    assert [e["usage"]["completion_tokens"] for e, _ in events] == [3, 5, 6, 9]
    assert events[-1][0]["choices"][0]["finish_reason"] == "length"
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e, _ in events)
    rec = _stream([(1.0, body)], sent=0.5)
    assert list(rec.reasoning_chunks or ()) == [0, 1] and list(rec.chunk_tokens) == [3, 2, 1, 3]
    # A reply that ends while still thinking: its last thought says why it ended.
    events = _sim_events(10, [3, 3])
    assert [k for _, k in events] == [3, 3] and events[-1][0]["choices"][0]["finish_reason"] == "length"
    assert all(e["choices"][0]["delta"]["content"] is None for e, _ in events)
