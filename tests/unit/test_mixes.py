"""Built-in traffic mixes and resolving the mixes a scenario references."""

from __future__ import annotations

import pytest

from loadgen.config.scenario import MixDef, parse_scenario
from loadgen.registry import UnknownNameError
from loadgen.traffic.mixes import BUILTIN_MIX_NAMES, builtin_mixes, resolve_mixes

# DESIGN.md's reference workloads: (bucket, min, max, weight) per mix, and output tokens.
REFERENCE = {
    "chat": ([("short", 50, 200, 0.7), ("medium", 200, 1000, 0.2), ("long", 1000, 4000, 0.1)], (50, 500)),
    "rag": ([("short", 200, 500, 0.2), ("medium", 500, 2000, 0.4), ("long", 2000, 8000, 0.4)], (100, 800)),
    "code": ([("short", 100, 300, 0.3), ("medium", 300, 1500, 0.4), ("long", 1500, 6000, 0.3)], (200, 2000)),
}


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_builtins_match_the_reference_table(name: str) -> None:
    mix = builtin_mixes().get(name)
    buckets, output = REFERENCE[name]
    assert [(b.name, *b.prompt_tokens, b.weight) for b in mix.buckets] == buckets
    assert mix.output_tokens == output
    assert mix.description


def test_builtin_system_prompts() -> None:
    registry = builtin_mixes()
    chat, rag = registry.get("chat"), registry.get("rag")
    assert 0 < chat.system_prompt_tokens < rag.system_prompt_tokens
    for name in registry.names():
        mix = registry.get(name)
        # A built-in must itself pass validation (the system prompt fits in the shortest bucket).
        assert MixDef.model_validate(mix.model_dump()) == mix


def test_registry_is_fresh_and_names_constant() -> None:
    first = builtin_mixes()
    first.register("extra", first.get("chat"))
    assert "extra" not in builtin_mixes()
    assert sorted(BUILTIN_MIX_NAMES) == builtin_mixes().names() == ["agent", "chat", "code", "rag"]
    with pytest.raises(UnknownNameError, match=r"mix 'nope' is not registered. Available mixs: \[.agent."):
        builtin_mixes().get("nope")


def test_resolve_only_referenced_in_order() -> None:
    scenario = parse_scenario(
        """
variants: [{name: a, base_url: "http://x", model: m}]
traffic:
  mixes: [{name: mine, weight: 2}, {name: rag}]
  custom_mixes:
    mine: {buckets: [{name: b, prompt_tokens: [10, 20]}], output_tokens: [1, 5]}
    unused: {buckets: [{name: b, prompt_tokens: [10, 20]}], output_tokens: [1, 5]}
"""
    )
    resolved = resolve_mixes(scenario.traffic)
    assert list(resolved) == ["mine", "rag"]
    assert resolved["mine"].buckets[0].prompt_tokens == (10, 20)
    assert resolved["rag"] == builtin_mixes().get("rag")


def test_resolve_default_traffic() -> None:
    scenario = parse_scenario('variants: [{name: a, base_url: "http://x", model: m}]')
    assert list(resolve_mixes(scenario.traffic)) == ["chat"]
