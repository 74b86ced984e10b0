"""The simulator's LoRA adapters (loadgen/sim/lora.py), driven step by step: a load prices the step that admits
the adapter's first request, at most `max_loras` are loaded (the least recently used unused one is evicted, and a
swapped-out adapter pays again), a request whose adapter finds no free slot waits while those behind it run, each
distinct adapter in the batch costs a little per step; unknown names are vLLM's 404."""

from __future__ import annotations

from dataclasses import replace

import orjson
import pytest

from loadgen.sim.engine import Engine
from loadgen.sim.framings import ApiError
from loadgen.sim.lora import LoraSlots, models_body, resolve_adapter
from loadgen.sim.profiles import SimProfile

from .test_sim_engine import Recorder, drain, words

LORA = SimProfile(
    name="lora",
    prefill_ms_per_1k_tokens=0.0,
    decode_base_ms=10.0,
    decode_ms_per_seq=0.0,
    decode_ms_per_1k_ctx=0.0,
    lora_adapters=3,
    max_loras=1,
    lora_load_ms=200.0,
    lora_ms_per_adapter=1.0,
)


def test_names_resolve_to_adapters_the_base_or_a_404() -> None:
    assert resolve_adapter(LORA, "lora", "adapter-2") == "adapter-2"
    assert resolve_adapter(LORA, "lora", "lora") == resolve_adapter(LORA, "lora", "") == ""
    for unknown in ("adapter-3", "adapter-x", "other"):
        with pytest.raises(ApiError) as err:
            resolve_adapter(LORA, "lora", unknown)
        assert (err.value.status, err.value.message) == (404, f"The model `{unknown}` does not exist.")
    # A variant serving no adapters takes any name as its model, as before.
    assert resolve_adapter(replace(LORA, lora_adapters=0), "lora", "anything") == ""
    listed = orjson.loads(models_body("lora", LORA))["data"]
    assert [(m["id"], m["parent"]) for m in listed] == [
        ("lora", None),
        ("adapter-0", "lora"),
        ("adapter-1", "lora"),
        ("adapter-2", "lora"),
    ]


def test_the_first_request_of_an_adapter_pays_its_load_and_the_next_does_not() -> None:
    engine = Engine(LORA)
    first = engine.submit("a", words(10), 2, Recorder(), adapter="adapter-0")
    plan = engine.plan_step()
    assert plan is not None and plan.admitted == [first] and first.lora_loaded
    assert plan.duration_s * 1000 == pytest.approx(10.0 + 200.0 + 1.0)  # step + load + one adapter in the batch
    engine.complete_step(plan)
    drain(engine)
    again = engine.submit("b", words(10), 2, Recorder(), adapter="adapter-0")
    base = engine.submit("c", words(10), 2, Recorder())
    plan = engine.plan_step()
    assert plan is not None and plan.admitted == [again, base] and not again.lora_loaded and not base.lora_loaded
    assert plan.duration_s * 1000 == pytest.approx(10.0 + 1.0)
    assert engine.loras.loads == 1


def test_a_busy_slot_makes_another_adapter_wait_while_the_rest_run_and_a_swap_loads_again() -> None:
    engine = Engine(LORA)
    a0 = engine.submit("a0", words(10), 3, Recorder(), adapter="adapter-0")
    a1 = engine.submit("a1", words(10), 1, Recorder(), adapter="adapter-1")
    base = engine.submit("base", words(10), 1, Recorder())
    plan = engine.plan_step()
    # adapter-0 takes the one slot; adapter-1 must wait for it, the base request behind it goes now.
    assert plan is not None and plan.admitted == [a0, base] and engine.num_waiting == 1
    engine.complete_step(plan)
    steps = 0
    while a1.scheduled_at is None:
        plan = engine.plan_step()
        assert plan is not None
        engine.complete_step(plan)
        steps += 1
    assert steps == 3 and a1.lora_loaded  # once a0 finished, adapter-1 evicted adapter-0 and paid its load
    drain(engine)
    back = engine.submit("back", words(10), 1, Recorder(), adapter="adapter-0")
    plan = engine.plan_step()
    assert plan is not None and plan.admitted == [back] and back.lora_loaded  # swapped out: loads again
    assert engine.loras.loads == 3


def test_slots_evict_the_least_recently_used_adapter_nobody_uses() -> None:
    slots = LoraSlots(2)
    assert slots.acquire("x", []) is True and slots.acquire("y", []) is True
    assert slots.acquire("x", []) is False  # x is now the most recent
    assert slots.acquire("z", ["x"]) is True  # evicts y (least recent, unused)
    assert slots.acquire("y", ["x", "z"]) is None  # both held by running sequences
    assert slots.acquire("x", []) is False and slots.loads == 3
