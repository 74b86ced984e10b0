"""The simulated engine's cost model and scheduling, mostly driven step by step without sleeping."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from loadgen.registry import UnknownNameError
from loadgen.sim.engine import Engine, RequestTooLargeError, SimSequence
from loadgen.sim.profiles import BLOCK_SIZE, SimProfile, get_profile, profile_registry

FLAT = SimProfile(
    name="flat",
    prefill_ms_per_1k_tokens=100.0,
    decode_base_ms=20.0,
    decode_ms_per_seq=1.0,
    decode_ms_per_1k_ctx=2.0,
)


class Recorder:
    """Token sink remembering every emission (with loop time when a loop runs)."""

    def __init__(self) -> None:
        self.events: list[tuple[float, int, bool]] = []

    def on_tokens(self, seq: SimSequence, n_tokens: int, finished: bool) -> None:
        try:
            t = asyncio.get_running_loop().time()
        except RuntimeError:
            t = 0.0
        self.events.append((t, n_tokens, finished))

    @property
    def tokens(self) -> list[int]:
        return [n for _, n, _ in self.events]


def words(n: int, tag: str = "w") -> list[str]:
    return [f"{tag}{i}" for i in range(n)]


def drain(engine: Engine, max_steps: int = 100_000) -> int:
    """Run steps until idle; returns the number of steps."""
    steps = 0
    while (plan := engine.plan_step()) is not None and steps < max_steps:
        engine.complete_step(plan)
        steps += 1
    return steps


def test_registry_has_builtin_profiles_and_names_unknown() -> None:
    names = profile_registry().names()
    assert {"baseline", "int8", "spec-decode", "prefix-cache"} <= set(names)
    int8, base = get_profile("int8"), get_profile("baseline")
    assert int8.decode_base_ms == pytest.approx(base.decode_base_ms * 0.6)
    assert int8.prefill_ms_per_1k_tokens == pytest.approx(base.prefill_ms_per_1k_tokens * 0.6)
    spec = get_profile("spec-decode")
    # Clearly faster per output token than baseline despite the dearer step.
    assert spec.decode_step_ms(1, 1000) / spec.expected_tokens_per_step < 0.6 * base.decode_step_ms(1, 1000)
    with pytest.raises(UnknownNameError, match="baseline"):
        get_profile("nope")


def test_single_request_step_costs() -> None:
    engine = Engine(FLAT)
    sink = Recorder()
    engine.submit("a", words(500), 3, sink)
    first = engine.plan_step()
    assert first is not None and first.admitted and not first.decoding
    # Prefill of 500 tokens plus the decode step the sequence joins: TTFT = prefill + one step.
    assert first.duration_s * 1000 == pytest.approx(50.0 + 20.0 + 1.0 + 2.0 * 500 / 1000)
    engine.complete_step(first)
    assert sink.tokens == [1]
    second = engine.plan_step()
    assert second is not None and second.decoding and not second.admitted
    assert second.duration_s * 1000 == pytest.approx(20.0 + 1.0 + 2.0 * 501 / 1000)
    engine.complete_step(second)
    drain(engine)
    assert sink.tokens == [1, 1, 1] and sink.events[-1][2] is True
    assert engine.num_running == 0 and engine.kv_reserved == 0
    assert engine.stats.prompt_tokens_total == 500 and engine.stats.generation_tokens_total == 3


def test_batching_makes_steps_slower() -> None:
    def decode_ms(batch: int) -> float:
        engine = Engine(FLAT)
        for i in range(batch):
            engine.submit(f"r{i}", words(100), 50, Recorder())
        first = engine.plan_step()
        assert first is not None and len(first.admitted) == batch
        engine.complete_step(first)
        plan = engine.plan_step()
        assert plan is not None
        return plan.duration_s * 1000

    one, many = decode_ms(1), decode_ms(32)
    assert many > one
    assert many - one == pytest.approx(31 * 1.0 + 2.0 * 31 * 101 / 1000)


def test_max_num_seqs_queues_the_rest() -> None:
    engine = Engine(replace(FLAT, max_num_seqs=2))
    sinks = [Recorder() for _ in range(3)]
    for i, sink in enumerate(sinks):
        engine.submit(f"r{i}", words(10), 2, sink)
    plan = engine.plan_step()
    assert plan is not None and [s.rid for s in plan.admitted] == ["r0", "r1"]
    assert engine.num_running == 2 and engine.num_waiting == 1
    engine.complete_step(plan)
    plan = engine.plan_step()  # r0, r1 finish here; r2 still waits for a free slot
    assert plan is not None and not plan.admitted
    engine.complete_step(plan)
    plan = engine.plan_step()
    assert plan is not None and [s.rid for s in plan.admitted] == ["r2"]
    engine.complete_step(plan)
    drain(engine)
    assert [s.tokens for s in sinks] == [[1, 1]] * 3


def test_kv_capacity_queues_and_rejects_impossible_requests() -> None:
    engine = Engine(replace(FLAT, kv_cache_tokens=100))
    with pytest.raises(RequestTooLargeError):
        engine.submit("huge", words(90), 20, Recorder())
    engine.submit("a", words(40), 20, Recorder())  # reserves 60
    engine.submit("b", words(30), 20, Recorder())  # 50 more would exceed 100
    plan = engine.plan_step()
    assert plan is not None and [s.rid for s in plan.admitted] == ["a"]
    assert engine.num_waiting == 1 and engine.kv_reserved == 60
    assert 0 < engine.kv_usage <= 1


def test_prefill_budget_spreads_a_burst_over_steps() -> None:
    engine = Engine(replace(FLAT, max_prefill_tokens_per_step=1000))
    for i in range(5):
        engine.submit(f"r{i}", words(400), 10, Recorder())
    engine.submit("big", words(3000), 10, Recorder())
    admitted: list[list[str]] = []
    while (plan := engine.plan_step()) is not None and len(admitted) < 4:
        admitted.append([s.rid for s in plan.admitted])
        assert plan.uncached_prompt_tokens <= 1000 or len(plan.admitted) == 1
        engine.complete_step(plan)
    assert admitted[:3] == [["r0", "r1"], ["r2", "r3"], ["r4"]]
    assert admitted[3] == ["big"]  # longer than the budget: admitted alone


def test_spec_decode_tokens_per_step_match_acceptance_math() -> None:
    profile = get_profile("spec-decode")
    engine = Engine(profile, seed=1)
    sink = Recorder()
    engine.submit("long", words(10), 60_000, sink)
    steps = drain(engine, max_steps=20_000)
    assert steps == 20_000
    assert max(sink.tokens) <= profile.spec_k
    hist = engine.stats.decode_tokens_hist
    mean = sum(n * c for n, c in hist.items()) / sum(hist.values())
    assert mean == pytest.approx(1 + 0.7 + 0.7**2 + 0.7**3, abs=0.05)
    # Stop-at-first-reject: P(exactly 1 token) = 1 - a.
    assert hist[1] / sum(hist.values()) == pytest.approx(0.3, abs=0.02)
    # vLLM's counters (exported to /metrics): k − 1 drafts per sequence and step, the tokens beyond the first accepted.
    s = engine.stats
    assert s.spec_drafts == sum(hist.values()) and s.spec_draft_tokens == (profile.spec_k - 1) * s.spec_drafts
    assert s.spec_accepted_tokens == sum((n - 1) * c for n, c in hist.items())


def test_spec_decode_never_overshoots_max_tokens() -> None:
    engine = Engine(replace(FLAT, spec_k=4, spec_acceptance=1.0))
    sink = Recorder()
    engine.submit("a", words(5), 6, sink)
    drain(engine)
    assert sink.tokens == [1, 4, 1]  # the first token comes from prefill, then capped at what is left


def test_prefix_cache_reduces_prefill() -> None:
    shared = words(20 * BLOCK_SIZE, "sys")

    def second_request_prefill(profile: SimProfile) -> tuple[int, int]:
        engine = Engine(profile)
        engine.submit("a", shared + words(40, "a"), 1, Recorder())
        plan = engine.plan_step()
        assert plan is not None
        engine.complete_step(plan)
        engine.submit("b", shared + words(40, "b"), 1, Recorder())
        plan = engine.plan_step()
        assert plan is not None
        return plan.uncached_prompt_tokens, plan.admitted[0].cached_tokens

    assert second_request_prefill(FLAT) == (len(shared) + 40, 0)
    uncached, cached = second_request_prefill(replace(FLAT, prefix_caching=True))
    assert cached == len(shared) and uncached == 40


def test_prefix_cache_always_computes_one_token() -> None:
    engine = Engine(replace(FLAT, prefix_caching=True))
    prompt = words(2 * BLOCK_SIZE)
    for rid in ("a", "b"):
        engine.submit(rid, prompt, 1, Recorder())
        plan = engine.plan_step()
        assert plan is not None
        engine.complete_step(plan)
    assert engine.stats.prefix_cache_hits == 2 * BLOCK_SIZE - 1


def test_abort_frees_slot_and_skips_waiting() -> None:
    engine = Engine(replace(FLAT, max_num_seqs=1))
    a_sink, b_sink, c_sink = Recorder(), Recorder(), Recorder()
    a = engine.submit("a", words(10), 100, a_sink)
    b = engine.submit("b", words(10), 2, b_sink)
    engine.submit("c", words(10), 2, c_sink)
    plan = engine.plan_step()
    assert plan is not None and plan.admitted == [a]
    engine.abort(a)  # mid-step: the client went away
    engine.abort(b)  # still waiting
    assert engine.num_running == 0 and engine.kv_reserved == 0 and engine.num_waiting == 1
    engine.complete_step(plan)
    assert a_sink.events == []
    plan = engine.plan_step()
    assert plan is not None and [s.rid for s in plan.admitted] == ["c"]
    engine.complete_step(plan)
    drain(engine)
    assert b_sink.events == [] and c_sink.tokens == [1, 1]
    assert engine.stats.requests_aborted == 2


async def _timed_run(profile: SimProfile, prompt: int, max_tokens: int) -> tuple[float, list[float]]:
    engine = Engine(profile)
    task = engine.start()
    await asyncio.sleep(0.01)  # engine idles on its event first
    sink = Recorder()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    engine.submit("t", words(prompt), max_tokens, sink)
    while not (sink.events and sink.events[-1][2]):
        await asyncio.sleep(0.005)
    await engine.close()
    assert task.done()
    return t0, [t for t, _, _ in sink.events]


def test_real_time_ttft_and_token_gaps() -> None:
    t0, times = asyncio.run(_timed_run(FLAT, prompt=500, max_tokens=12))
    ttft_ms = (times[0] - t0) * 1000
    expected_ttft = 50.0 + 20.0 + 1.0 + 1.0
    assert expected_ttft - 1 <= ttft_ms <= expected_ttft + 15
    step_ms = 20.0 + 1.0 + 2.0 * 0.5
    gaps = [(b - a) * 1000 for a, b in zip(times, times[1:], strict=False)]
    assert sum(gaps) / len(gaps) == pytest.approx(step_ms, rel=0.1)
    # Step ends are scheduled on absolute time: sleep overshoot does not pile up over the stream.
    assert (times[-1] - times[0]) * 1000 == pytest.approx(11 * step_ms, abs=8)
