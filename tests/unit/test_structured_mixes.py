"""Mixes with real structure: bucket shares and lengths over 10,000 requests, RAG documents by Zipf popularity,
pools of system prompts, the shared prefix, and pairing by (seed, stream, index).

The statistical checks are Pearson chi-square tests at a false-alarm rate of 0.1 % each (the seeds are fixed, so
a pass is reproducible; the rate says how unlikely a pass would be to fail with another seed). Critical values:
df 2 -> 13.816 (= -2 ln 0.001, exact for df 2), df 9 -> 27.877, df 19 -> 43.820.
"""

from __future__ import annotations

from collections import Counter

import pytest

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from loadgen.config.traffic import MIN_QUESTION_TOKENS, Bucket, Documents, MixDef
from loadgen.traffic.code_text import count_units
from loadgen.traffic.mixes import builtin_mixes
from loadgen.traffic.sampler import RequestSampler, sampler_for

N = 10_000
CRITICAL = {2: 13.816, 9: 27.877, 19: 43.820}


def _chi2(observed: list[int], expected: list[float]) -> float:
    return sum((o - e) ** 2 / e for o, e in zip(observed, expected, strict=True))


def _builtin(name: str, seed: int = 2024) -> tuple[MixDef, list]:
    mix = builtin_mixes().get(name)
    s = RequestSampler({name: mix}, {name: 1.0}, seed=seed)
    return mix, [s.spec_at(i) for i in range(N)]


@pytest.mark.parametrize("name", ["chat", "rag", "code"])
def test_bucket_shares_and_lengths_match_the_mix(name: str) -> None:
    mix, specs = _builtin(name)
    counts = Counter(spec.bucket for spec in specs)
    total = sum(b.weight for b in mix.buckets)
    stat = _chi2([counts[b.name] for b in mix.buckets], [N * b.weight / total for b in mix.buckets])
    assert stat < CRITICAL[2], (name, dict(counts), stat)
    for bucket in mix.buckets:
        lo, hi = bucket.prompt_tokens
        lengths = [spec.prompt_tokens for spec in specs if spec.bucket == bucket.name]
        assert all(lo <= n <= hi for n in lengths)
        # Uniform within the bucket: ten equal bins of [lo, hi] (bins of integer lengths, sized exactly).
        edges = [lo + (hi - lo + 1) * k // 10 for k in range(11)]
        observed = [sum(edges[k] <= n < edges[k + 1] for n in lengths) for k in range(10)]
        expected = [len(lengths) * (edges[k + 1] - edges[k]) / (hi - lo + 1) for k in range(10)]
        assert _chi2(observed, expected) < CRITICAL[9], (name, bucket.name, observed)
        # Without a tokenizer a prompt is words: exactly its target count of them.
    for spec in specs[:500]:
        assert len(spec.system_prompt.split()) + count_units(spec.prompt) == spec.prompt_tokens
        assert mix.output_tokens[0] <= spec.max_tokens <= mix.output_tokens[1]


def test_builtin_rag_documents_and_fallback_for_short_requests() -> None:
    mix, specs = _builtin("rag")
    docs = mix.documents
    assert docs is not None and (docs.pool, docs.per_request, docs.tokens, docs.zipf) == (200, 4, 250, 1.0)
    sampler = RequestSampler({"rag": mix}, {"rag": 1.0}, seed=2024)
    for spec in specs[:2000]:
        room = spec.prompt_tokens - mix.system_prompt_tokens - MIN_QUESTION_TOKENS
        expected = min(docs.per_request, room // docs.tokens)
        picked = sampler.document_indices(spec)
        assert len(picked) == expected == (spec.shared_prefix_tokens - mix.system_prompt_tokens) // docs.tokens
        assert len(set(picked)) == len(picked)
        if spec.bucket == "long":
            assert len(picked) == 4
    shares = Counter(spec.shared_prefix_tokens > mix.system_prompt_tokens for spec in specs)
    assert shares[True] > 0.8 * N  # most rag requests carry documents


def _doc_sampler(zipf: float, pool: int = 20, k: int = 3, seed: int = 7) -> tuple[RequestSampler, list]:
    mix = MixDef(
        buckets=[Bucket(name="b", prompt_tokens=(400, 400))],
        output_tokens=(1, 1),
        system_prompt_tokens=10,
        documents=Documents(pool=pool, per_request=k, tokens=100, zipf=zipf),
    )
    s = RequestSampler({"m": mix}, {"m": 1.0}, seed=seed)
    return s, [s.document_indices(s.spec_at(i)) for i in range(N)]


def test_zipf_popularity_order_and_exact_first_draw() -> None:
    _, picks = _doc_sampler(1.0)
    counts = Counter(j for p in picks for j in p)
    ranked = [counts[j] for j in range(20)]
    assert ranked[0] == max(ranked) and ranked[0] > ranked[1] > ranked[2] > ranked[5] > ranked[19]
    # The first document of a request is drawn from the full Zipf(1) distribution: test it exactly.
    first = Counter(p[0] for p in picks)
    weights = [1 / r for r in range(1, 21)]
    expected = [N * w / sum(weights) for w in weights]
    assert _chi2([first[j] for j in range(20)], expected) < CRITICAL[19]


def test_zipf_zero_is_uniform() -> None:
    # Counts of draws without replacement vary less than multinomial ones, so this test is conservative.
    _, picks = _doc_sampler(0.0)
    counts = Counter(j for p in picks for j in p)
    assert _chi2([counts[j] for j in range(20)], [N * 3 / 20] * 20) < CRITICAL[19]


def test_steep_zipf_still_gives_distinct_documents() -> None:
    _, picks = _doc_sampler(6.0, pool=4, k=3)  # 400 tokens hold 3 documents of 100
    assert all(len(set(p)) == len(p) == 3 for p in picks)
    assert Counter(tuple(p) for p in picks).most_common(1)[0][0] == (0, 1, 2)


def test_chat_draws_from_its_pool_of_system_prompts() -> None:
    mix, specs = _builtin("chat")
    assert mix.system_prompts == 8
    counts = Counter(spec.system_prompt for spec in specs)
    assert len(counts) == 8
    stat = _chi2(list(counts.values()), [N / 8] * 8)
    assert stat < 24.322  # df 7 at 0.1 %
    assert all(spec.shared_prefix_tokens == mix.system_prompt_tokens for spec in specs)


def test_shared_prefix_is_a_real_prefix() -> None:
    registry = builtin_mixes()
    mixes = {name: registry.get(name) for name in registry.names()}
    s = RequestSampler(mixes, {"chat": 1.0, "rag": 2.0, "code": 1.0}, seed=11)
    by_first_doc: dict[int, set[str]] = {}
    for i in range(1000):
        spec = s.spec_at(i)
        if spec.mix == "code":  # code lines, not words: tests/unit/test_code_text.py
            continue
        words = f"{spec.system_prompt} {spec.prompt}".split(" ")
        assert len(words) == spec.prompt_tokens
        prefix = " ".join(words[: spec.shared_prefix_tokens])
        assert f"{spec.system_prompt} {spec.prompt}".startswith(prefix)
        assert prefix.startswith(spec.system_prompt)
        picked = s.document_indices(spec)
        if picked:
            # Requests that drew the same first document share system prompt + that document, word for word.
            first = " ".join(words[: len(spec.system_prompt.split()) + mixes["rag"].documents.tokens])  # type: ignore[union-attr]
            by_first_doc.setdefault(picked[0], set()).add(first)
        # What follows the prefix is the request's own question: its tag is unique.
        assert words[spec.shared_prefix_tokens].startswith("r")
    assert by_first_doc and all(len(texts) == 1 for texts in by_first_doc.values())
    assert max(len(v) for v in by_first_doc.values()) == 1


def test_requests_are_identical_for_the_same_seed_stream_index() -> None:
    registry = builtin_mixes()
    mixes = {name: registry.get(name) for name in registry.names()}
    weights = {"chat": 1.0, "rag": 1.0}
    a = RequestSampler(mixes, weights, seed=3, stream=2)
    b = RequestSampler(mixes, weights, seed=3).with_stream(2)
    assert [a.spec_at(i) for i in range(300)] == [b.spec_at(i) for i in range(300)]
    assert [a.spec_at(i) for i in range(50)] == [a.next() for _ in range(50)]
    other = RequestSampler(mixes, weights, seed=3, stream=3)
    assert sum(a.spec_at(i) == other.spec_at(i) for i in range(300)) == 0
    reseeded = RequestSampler(mixes, weights, seed=4, stream=2)
    assert sum(a.spec_at(i).prompt == reseeded.spec_at(i).prompt for i in range(300)) == 0


_SCENARIO = """\
variants: [{name: a, base_url: "http://127.0.0.1:1", model: m}]
traffic:
  mixes: [{name: kb}]
  custom_mixes:
    kb:
      buckets: [{name: b, prompt_tokens: [300, 600]}]
      output_tokens: [1, 4]
      system_prompt_tokens: 20
      system_prompts: 2
      documents: %s
"""


def test_scenario_fields_work_end_to_end() -> None:
    scenario = parse_scenario(_SCENARIO % "{pool: 10, per_request: 2, tokens: 120, zipf: 0.5}")
    s = sampler_for(scenario, 1)
    specs = [s.spec_at(i) for i in range(400)]
    assert len({spec.system_prompt for spec in specs}) == 2
    assert {len(s.document_indices(spec)) for spec in specs} == {2}
    assert all(spec.shared_prefix_tokens == 20 + 240 for spec in specs)
    assert sampler_for(scenario, 1).spec_at(7) == specs[7]


@pytest.mark.parametrize(
    ("documents", "path", "message"),
    [
        ("{pool: 3, per_request: 4}", "per_request", "exceeds the pool"),
        ("{tokens: 600}", "tokens", "no request could carry a document"),
        ("{zipf: -1}", "zipf", "must be at least 0"),
    ],
)
def test_documents_are_checked(documents: str, path: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(_SCENARIO % documents)
    assert path in str(info.value) and message in str(info.value)
