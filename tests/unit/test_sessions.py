"""Multi-turn sessions: the `sessions` block's checks, the seeded (paired) session stream, a conversation's growing
history, and TTFT by turn aggregated across workers and reported."""

from __future__ import annotations

from array import array
from collections import Counter

import pytest

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import Scenario, parse_scenario
from loadgen.measure.aggregate import WIRE_VERSION, Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report import build_report, render_markdown
from loadgen.traffic.sampler import sampler_for
from loadgen.traffic.sessions import Conversation

VARIANTS = """
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m}
  - {name: b, base_url: "http://127.0.0.1:2", model: m}
"""


def _scenario(mixes: str, seed: int = 3) -> Scenario:
    return parse_scenario(f"{VARIANTS}seed: {seed}\ntraffic:\n  mixes: {mixes}\n")


SESSIONS = "[{name: chat, sessions: {turns: [2, 5], think_time: 1.5s, follow_up_tokens: [10, 40]}}, {name: rag}]"


def test_sessions_block_is_read_and_each_mistake_names_its_field() -> None:
    s = _scenario("[{name: chat, sessions: {turns: 4}}]")
    sessions = s.traffic.mixes[0].sessions
    assert sessions is not None and sessions.turns == (4, 4) and sessions.think_time == 0.0
    bad = {
        "{turns: 1}": ("traffic.mixes[0].sessions.turns", "at least 2 turns"),
        "{turns: [3, 2]}": ("traffic.mixes[0].sessions.turns", "min <= max"),
        "{turns: yes}": ("traffic.mixes[0].sessions.turns", "whole number of turns"),
        "{turns: 3, think_time: -1}": ("traffic.mixes[0].sessions.think_time", ""),
        "{turns: 3, follow_up_tokens: [0, 5]}": ("traffic.mixes[0].sessions.follow_up_tokens", ">= 1"),
        "{turns: 3, turn_delay: 1s}": ("traffic.mixes[0].sessions.turn_delay", ""),
    }
    for block, (path, words) in bad.items():
        with pytest.raises(ConfigError) as err:
            _scenario(f"[{{name: chat, sessions: {block}}}]")
        issues = {i.path: i.message for i in err.value.issues}
        assert path in issues and words in issues[path], (block, issues)


def test_a_dataset_takes_no_sessions(tmp_path: object) -> None:
    from pathlib import Path

    rows = Path(str(tmp_path)) / "d.jsonl"
    rows.write_text('{"prompt": "hello there", "output_tokens": 5}\n', encoding="utf-8")
    text = f"{VARIANTS}traffic:\n  dataset: {{path: {rows}}}\n  mixes: [{{name: dataset, sessions: {{turns: 3}}}}]\n"
    with pytest.raises(ConfigError) as err:
        parse_scenario(text)
    assert [i.path for i in err.value.issues] == ["traffic.mixes[0].sessions"]


def test_session_stream_is_the_same_for_every_variant_and_worker_and_turns_cover_the_range() -> None:
    s = _scenario(SESSIONS)
    one, other = sampler_for(s, 5), sampler_for(s, 0).with_stream(5)  # built apart, as on two workers
    turns: Counter[int] = Counter()
    for i in range(2000):
        x, y = one.spec_at(i), other.spec_at(i)
        assert x == y
        if x.mix == "rag":
            assert (x.turn, x.turns) == (0, 0)
            continue
        turns[x.turns] += 1
        assert x.turn == 1
        for k in range(2, x.turns + 1):
            text, words, max_tokens = one.follow_up(x, k)
            assert (text, words, max_tokens) == other.follow_up(y, k)
            assert 10 <= words <= 40 and len(text.split()) == words and 50 <= max_tokens <= 500
    # Uniform over 2..5 (about 250 each of ~1000 chat sessions; 4 sigma is ~55).
    assert set(turns) == {2, 3, 4, 5} and min(turns.values()) > 180, turns
    # Another stream, another session: follow-ups are drawn per (stream, index, turn).
    x0 = next(sp for sp in (one.spec_at(i) for i in range(50)) if sp.turns)
    assert one.follow_up(x0, 2) != sampler_for(s, 6).follow_up(x0, 2)
    assert one.follow_up(x0, 2) != one.follow_up(x0, 3) or x0.turns < 3


def test_sessions_leave_the_opening_request_as_the_mix_makes_it() -> None:
    plain, with_sessions = sampler_for(_scenario("[{name: chat}]"), 2), sampler_for(_scenario(SESSIONS), 2)
    for i in range(200):
        a, b = plain.spec_at(i), with_sessions.spec_at(i)
        if b.mix == "chat":  # the mix draw depends on the weights, the request itself does not
            assert (a.prompt, a.system_prompt, a.prompt_tokens, a.max_tokens) == (
                b.prompt,
                b.system_prompt,
                b.prompt_tokens,
                b.max_tokens,
            )


def test_conversation_history_grows_with_the_replies() -> None:
    sampler = sampler_for(_scenario(SESSIONS), 1)
    first = next(sp for sp in (sampler.spec_at(i) for i in range(50)) if sp.turns >= 3)
    conv = Conversation(sampler, first)
    assert conv.think_time == 1.5 and conv.turn == 1 and not conv.over
    replies = ["alpha beta gamma", ""]  # the second reply kept no text: it adds nothing
    prev, spec = first, None
    for k, reply in enumerate(replies, start=2):
        spec = conv.reply(reply, len(reply.split()) or 7)
        assert spec is not None and (spec.turn, spec.turns, spec.index, spec.mix) == (
            k,
            first.turns,
            first.index,
            "chat",
        )
        text, words, max_tokens = sampler.follow_up(first, k)
        assert spec.messages is not None
        assert spec.messages[-2] == {"role": "assistant", "content": reply}
        assert spec.messages[-1] == {"role": "user", "content": text}
        assert spec.prompt_tokens == prev.prompt_tokens + len(reply.split()) + words
        assert spec.shared_prefix_tokens == prev.prompt_tokens and spec.max_tokens == max_tokens
        prev = spec
    assert spec is not None and spec.messages is not None
    roles = [m["role"] for m in spec.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user"]
    assert spec.messages[1]["content"] == first.prompt and spec.messages[0]["content"] == first.system_prompt
    # Every word of the history is in the raw prompt too (servers that take one text).
    words_sent = len(spec.system_prompt.split()) + len(spec.prompt.split())
    assert words_sent == spec.prompt_tokens
    while not conv.over:
        assert conv.reply("x", 1) is not None
    assert conv.reply("x", 1) is None and conv.turn == first.turns
    with pytest.raises(ValueError, match="opens no session"):
        Conversation(sampler, sampler_for(_scenario("[{name: chat}]"), 1).spec_at(0))


def _turn(variant: str, turn: int, ttft: float, prompt: int, ok: bool = True) -> RequestRecord:
    times = array("d", [10.0 + ttft + 0.01 * k for k in range(3)])
    rec = RequestRecord(f"{variant}-{turn}-{ttft}", variant, "chat", "short", sent=10.0, turn=turn)
    if not ok:
        rec.error, rec.done = ErrorKind.HTTP_5XX, 10.2
        return rec
    rec.chunk_times, rec.chunk_tokens = times, array("l", [1, 1, 1])
    rec.done, rec.output_tokens, rec.prompt_tokens = times[-1], 3, prompt
    return rec


def test_turns_merge_across_workers_as_if_one_process_saw_every_record() -> None:
    records = [_turn("a", t, 0.01 * t + 0.001 * j, 100 * t + j) for t in (1, 2, 3) for j in range(10)]
    records += [_turn("a", 3, 0.0, 0, ok=False), _turn("b", 1, 0.02, 50)]
    records.append(RequestRecord("plain", "a", "chat", "short", sent=10.0, done=10.1))  # no session: no turn
    alone, w1, w2, master = Aggregate(), Aggregate(), Aggregate(), Aggregate()
    for i, rec in enumerate(records):
        alone.add(rec, 0.0)
        (w1 if i % 2 else w2).add(rec, 0.0)
    wire = w1.pop_delta(histograms=False)  # counters now, histograms later: nothing lost or counted twice
    assert wire["v"] == WIRE_VERSION
    master.merge_wire(wire)
    master.merge_wire(w1.pop_delta())
    master.merge_wire(w2.pop_delta())
    assert (
        set(master.turns)
        == set(alone.turns)
        == {("a", "chat", 1), ("a", "chat", 2), ("a", "chat", 3), ("b", "chat", 1)}
    )
    for key, want in alone.turns.items():
        got = master.turns[key]
        assert (got.requests, got.ok, got.prompt_reported, got.prompt_tokens, got.censored) == (
            want.requests,
            want.ok,
            want.prompt_reported,
            want.prompt_tokens,
            want.censored,
        )
        for m in ("ttft", "e2e"):
            assert got.hists[m].encode() == want.hists[m].encode()
    t3 = master.turns[("a", "chat", 3)]
    assert (t3.requests, t3.ok, t3.prompt_tokens, t3.censored) == (
        11,
        10,
        sum(300 + j for j in range(10)),
        {"ttft": 1, "e2e": 1},
    )


def test_report_gives_ttft_by_turn_per_variant_and_mix() -> None:
    agg = Aggregate()
    for t in (1, 2, 3):
        for _ in range(20):
            agg.add(_turn("a", t, 0.1 * t, 1000 * t), 0.0)
    agg.add(_turn("a", 2, 0.0, 0, ok=False), 0.0)
    agg.add(RequestRecord("plain", "b", "chat", "short", sent=10.0, done=10.1), 0.0)
    report = build_report(_scenario(SESSIONS), agg, 10.0)
    a, b = report["variants"]
    turns = a["mixes"]["chat"]["turns"]
    assert list(turns) == ["1", "2", "3"]
    assert (turns["2"]["requests"], turns["2"]["ok"], turns["2"]["ended_by_failure"]) == (21, 20, 1)
    assert [turns[k]["mean_prompt_tokens"] for k in turns] == [1000.0, 2000.0, 3000.0]
    for k in turns:  # 100 ms a turn, within the histogram's 1 % (and no clock: the samples are exact)
        assert turns[k]["ttft_ms"]["p50"] == pytest.approx(100.0 * int(k), rel=0.01)
    assert b["mixes"]["chat"]["turns"] == {}
    md = render_markdown(report)
    assert "## TTFT by turn (multi-turn sessions, ms)" in md
    assert "| a | chat | 2 | 21 | 20 | 1 | 2,000.0 |" in md
