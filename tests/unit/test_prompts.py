"""The seeded request stream: determinism, random access, frequencies, prompt shape."""

from __future__ import annotations

from collections import Counter

import pytest

from loadgen.config.scenario import Bucket, MixDef, parse_scenario
from loadgen.traffic.mixes import builtin_mixes
from loadgen.traffic.sampler import WORDS, RequestSampler, RequestSpec, sampler_for


def builtins() -> dict[str, MixDef]:
    registry = builtin_mixes()
    return {name: registry.get(name) for name in registry.names()}


WEIGHTS = {"chat": 0.5, "rag": 0.25, "code": 0.25}


def sampler(seed: int = 7, stream: int = 0) -> RequestSampler:
    return RequestSampler(builtins(), WEIGHTS, seed=seed, stream=stream)


def test_same_seed_same_stream() -> None:
    a, b = sampler(), sampler()
    assert [a.next() for _ in range(50)] == [b.next() for _ in range(50)]


def test_other_seed_or_stream_differs() -> None:
    base = [sampler().next().prompt for _ in range(1)]
    assert sampler(seed=8).next().prompt != base[0]
    assert sampler(stream=1).next().prompt != base[0]


def test_random_access_matches_sequence() -> None:
    walk = sampler()
    specs = [walk.next() for _ in range(200)]
    access = sampler()
    for i in (199, 0, 57, 3, 120):
        assert access.spec_at(i) == specs[i]
        assert specs[i].index == i


def test_with_stream_equals_fresh_sampler() -> None:
    base = sampler(stream=0)
    base.next()
    fork = base.with_stream(3)
    fresh = sampler(stream=3)
    assert [fork.next() for _ in range(20)] == [fresh.next() for _ in range(20)]
    assert base.next() == sampler(stream=0).spec_at(1)  # the original is untouched


def test_mix_and_bucket_frequencies() -> None:
    s = sampler(seed=123)
    n = 20_000
    specs = [s.spec_at(i) for i in range(n)]
    mix_counts = Counter(spec.mix for spec in specs)
    for name, weight in WEIGHTS.items():
        assert mix_counts[name] / n == pytest.approx(weight, abs=0.015)
    mixes = builtins()
    for name in WEIGHTS:
        of_mix = [spec for spec in specs if spec.mix == name]
        bucket_counts = Counter(spec.bucket for spec in of_mix)
        for bucket in mixes[name].buckets:
            assert bucket_counts[bucket.name] / len(of_mix) == pytest.approx(bucket.weight, abs=0.03)


def test_lengths_within_ranges() -> None:
    s = sampler(seed=5)
    mixes = builtins()
    seen_lo = seen_hi = False
    for i in range(5_000):
        spec = s.spec_at(i)
        mix = mixes[spec.mix]
        bucket = next(b for b in mix.buckets if b.name == spec.bucket)
        lo, hi = bucket.prompt_tokens
        assert lo <= spec.prompt_tokens <= hi
        assert mix.output_tokens[0] <= spec.max_tokens <= mix.output_tokens[1]
        seen_lo |= spec.prompt_tokens == lo
        seen_hi |= spec.prompt_tokens == hi
    assert seen_lo or seen_hi  # both ends reachable (the short buckets are narrow enough to hit one)


def test_prompt_word_counts_exact() -> None:
    s = sampler(seed=9)
    known = set(WORDS)
    for i in range(300):
        spec = s.spec_at(i)
        if spec.mix == "code":  # code lines, not words: tests/unit/test_code_text.py
            continue
        system_words = spec.system_prompt.split() if spec.system_prompt else []
        prompt_words = spec.prompt.split(" ")
        assert len(system_words) + len(prompt_words) == spec.prompt_tokens
        assert "" not in prompt_words  # single spaces, no leading or trailing space
        # The tag opens the question, after the documents (if any).
        at = spec.shared_prefix_tokens - len(system_words)
        assert set(prompt_words[:at] + prompt_words[at + 1 :]) <= known
        assert prompt_words[at].startswith("r") and prompt_words[at].endswith(f"-{i}")


def test_tags_unique_and_system_prompt_shared() -> None:
    a, b = sampler(stream=0), sampler(stream=1)
    specs = [a.spec_at(i) for i in range(500)] + [b.spec_at(i) for i in range(500)]
    tags = [spec.prompt.split(" ")[spec.shared_prefix_tokens - len(spec.system_prompt.split())] for spec in specs]
    assert len(set(tags)) == len(tags)
    mixes = builtins()
    for name in WEIGHTS:
        system_prompts = {spec.system_prompt for spec in specs if spec.mix == name}
        # Identical across requests and streams: the mix's pool of them (chat: 8, the others: 1), all drawn.
        assert len(system_prompts) == mixes[name].system_prompts
        for text in system_prompts:
            assert len(text.split()) == mixes[name].system_prompt_tokens
    assert len({spec.system_prompt for spec in specs}) == sum(mixes[name].system_prompts for name in WEIGHTS)


def test_no_system_prompt_and_tag_only_prompt() -> None:
    mix = MixDef(buckets=[Bucket(name="one", prompt_tokens=(1, 1))], output_tokens=(1, 1))
    spec = RequestSampler({"tiny": mix}, {"tiny": 1.0}, seed=0).next()
    assert spec == RequestSpec(0, "tiny", "one", "", spec.prompt, 1, 1)
    assert len(spec.prompt.split()) == 1
    mix = MixDef(buckets=[Bucket(name="b", prompt_tokens=(3, 3))], output_tokens=(1, 1), system_prompt_tokens=2)
    spec = RequestSampler({"m": mix}, {"m": 1.0}, seed=0).next()
    assert len(spec.system_prompt.split()) == 2 and len(spec.prompt.split()) == 1


def test_listing_order_does_not_change_the_stream() -> None:
    a = RequestSampler(builtins(), {"chat": 1.0, "rag": 2.0}, seed=1)
    b = RequestSampler(builtins(), {"rag": 2.0, "chat": 1.0}, seed=1)
    assert [a.spec_at(i) for i in range(30)] == [b.spec_at(i) for i in range(30)]


@pytest.mark.parametrize(
    ("weights", "message"),
    [({}, "empty"), ({"nope": 1.0}, "no definition"), ({"chat": 0.0}, "> 0"), ({"chat": float("inf")}, "finite")],
)
def test_bad_weights(weights: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RequestSampler(builtins(), weights, seed=0)


def test_sampler_for_scenario() -> None:
    scenario = parse_scenario(
        """
seed: 11
variants: [{name: a, base_url: "http://x", model: m}]
traffic:
  mixes: [{name: short, weight: 3}, {name: chat}]
  custom_mixes:
    short: {buckets: [{name: b, prompt_tokens: [10, 20]}], output_tokens: [1, 5], system_prompt_tokens: 4}
"""
    )
    s = sampler_for(scenario, stream=2)
    assert (s.seed, s.stream) == (11, 2)
    counts = Counter(s.next().mix for _ in range(2_000))
    assert counts["short"] / 2_000 == pytest.approx(0.75, abs=0.04)
    assert sampler_for(scenario, stream=2).spec_at(5) == s.spec_at(5)


@pytest.mark.parametrize("length", [2, 2048, 2049, 4097, 6145, 20_000])
def test_long_prompts_wrap_exactly(length: int) -> None:
    # Prompt text is a window onto a repeated block of words; windows of any length, wrapping or not, are exact.
    mix = MixDef(buckets=[Bucket(name="b", prompt_tokens=(length, length))], output_tokens=(1, 1))
    s = RequestSampler({"m": mix}, {"m": 1.0}, seed=3)
    for i in range(20):
        words = s.spec_at(i).prompt.split(" ")
        assert len(words) == length and "" not in words
