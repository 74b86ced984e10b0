"""`unique_prefixes`: the same traffic with the request's tag first, so no two requests share a cacheable prefix."""

from __future__ import annotations

from loadgen.traffic.mixes import builtin_mixes
from loadgen.traffic.sampler import RequestSampler


def _pair(name: str) -> tuple[RequestSampler, RequestSampler]:
    shared = builtin_mixes().get(name)
    unique = shared.model_copy(update={"unique_prefixes": True})
    return (
        RequestSampler({name: shared}, {name: 1.0}, seed=4),
        RequestSampler({name: unique}, {name: 1.0}, seed=4),
    )


def test_same_lengths_and_text_with_the_tag_moved_first() -> None:
    for name in ("rag", "chat", "code"):
        a, b = _pair(name)
        for i in range(300):
            x, y = a.spec_at(i), b.spec_at(i)
            assert (x.bucket, x.prompt_tokens, x.max_tokens) == (y.bucket, y.prompt_tokens, y.max_tokens)
            assert y.shared_prefix_tokens == 0 < x.shared_prefix_tokens
            tag = f"r{x.prompt.split(f'-{i}', 1)[0].rsplit('r', 1)[1]}-{i}"
            assert tag in x.prompt and tag not in x.system_prompt
            # The tag opens the system prompt; the rest is the same text in the same order.
            assert y.system_prompt == f"{tag} {x.system_prompt}"
            assert " ".join(y.prompt.split()) == " ".join(x.prompt.replace(tag, "", 1).split())


def test_no_two_unique_requests_share_a_first_word_where_shared_ones_share_the_whole_system_prompt() -> None:
    a, b = _pair("rag")
    shared = [a.spec_at(i) for i in range(200)]
    unique = [b.spec_at(i) for i in range(200)]
    assert len({s.system_prompt for s in shared}) == 1
    assert len({s.system_prompt.split(" ", 1)[0] for s in unique}) == 200
