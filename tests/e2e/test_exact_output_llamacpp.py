"""`exact_output` against the real llama.cpp server: with it, every request generates exactly max_tokens; without
it, SmolLM2 ends some answers early at its end-of-sequence token.

Each request is built as a run builds it (the variant's validated `extra_body` handed to its dialect's
`build_body`) and read with the dialect's own parser; the count checked is the server's (`usage` /
`tokens_predicted` in the final event), not ours.
"""

from __future__ import annotations

import urllib.request

import pytest

from loadgen.config.scenario import Variant
from loadgen.protocol.dialects import get_dialect
from loadgen.traffic.mixes import builtin_mixes
from loadgen.traffic.sampler import RequestSampler, RequestSpec

pytestmark = pytest.mark.e2e

MAX_TOKENS = 96
REQUESTS = 8  # per dialect and setting: 24 requests of <= 96 tokens, ~50 s on one core of SmolLM2-135M


def _stream(url: str, variant: Variant, spec: RequestSpec) -> tuple[int | None, str | None]:
    """Send `spec` as `variant` would; the server's completion tokens and finish reason from the final event."""
    dialect = get_dialect(variant.dialect)
    body = dialect.build_body(spec, variant.model, False, variant.extra_body or None)
    request = urllib.request.Request(
        url + dialect.path_for(variant.model), body, headers={"Content-Type": "application/json"}
    )
    tokens, finish = None, None
    with urllib.request.urlopen(request, timeout=120) as reply:
        for line in reply:
            if not line.startswith(b"data:"):
                continue
            chunk = dialect.parse(line[5:].strip())
            assert chunk.error is None, chunk.error
            if chunk.usage and chunk.usage.get("completion_tokens") is not None:
                tokens = chunk.usage["completion_tokens"]
            finish = chunk.finish_reason or finish
            if chunk.done:
                break
    return tokens, finish


_QUESTIONS = (
    "What is the capital of France?",
    "Say hello.",
    "What is 2 + 2?",
    "Name one primary colour.",
)


def _specs() -> list[RequestSpec]:
    """Questions with a short answer (where the model wants to stop), then short prompts of the built-in chat mix
    (its system prompt + common words); every one asks for MAX_TOKENS."""
    specs = [RequestSpec(i, "q", "short", "", q, 0, MAX_TOKENS) for i, q in enumerate(_QUESTIONS)]
    sampler = RequestSampler({"chat": builtin_mixes().get("chat")}, {"chat": 1.0}, seed=5)
    chat = [s for s in (sampler.spec_at(i) for i in range(60)) if s.bucket == "short"][: REQUESTS - len(specs)]
    for s in chat:
        s.max_tokens = MAX_TOKENS
    return specs + chat


# Greedy decoding: the same tokens on every run, so whether an answer ends early does not depend on the sampler's seed.
_GREEDY = {"temperature": 0}


@pytest.mark.parametrize("dialect", ["openai-chat", "llamacpp"])
def test_exact_output_makes_every_request_max_tokens_long(llama_server: str, dialect: str) -> None:
    specs = _specs()
    exact = Variant(name="exact", base_url=llama_server, model="m", dialect=dialect, extra_body=_GREEDY)
    assert exact.extra_body == {**_GREEDY, "ignore_eos": True}
    on = [_stream(llama_server, exact, s) for s in specs]
    print(f"{dialect}: exact_output on: {on}")
    assert on == [(MAX_TOKENS, "length")] * len(specs)


def test_without_exact_output_some_answers_end_early(llama_server: str) -> None:
    # Through the chat template, whose end-of-turn token the model emits when it has answered.
    specs = _specs()
    capped = Variant(name="capped", base_url=llama_server, model="m", extra_body=_GREEDY, exact_output=False)
    assert capped.extra_body == _GREEDY
    off = [_stream(llama_server, capped, s) for s in specs]
    print(f"exact_output off: {off}")
    early = [t for t, f in off if f == "stop"]
    assert early and all(t is not None and t < MAX_TOKENS for t in early), off
    assert all(t == MAX_TOKENS for t, f in off if f == "length"), off
