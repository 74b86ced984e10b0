"""A synthetic mix flattened for fast drawing: its buckets' cumulative weights, its output range, and the text it
shares across its requests (its system prompts and its pool of documents), built once per sampler.

Its shared text depends on the seed and the mix only, never on the stream: every worker and every user shares the
prefix a server's cache could reuse. Prompt 0 keeps the seed a single-prompt mix always had.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from itertools import accumulate

from loadgen.config.scenario import MixDef
from loadgen.traffic.draws import stable_int

__all__ = ["MixTable", "mix_table"]


class MixTable:
    """A mix flattened for fast drawing: cumulative bucket weights and plain tuples."""

    __slots__ = (
        "name",
        "cum_weights",
        "buckets",
        "output",
        "system_prompt",
        "system_prompts",
        "system_words",
        "overhead",
        "documents",
        "doc_words",
        "doc_cum",
        "doc_weights",
        "per_request",
        "structured",
    )

    def __init__(self, name: str, mix: MixDef, system_prompts: list[str], documents: list[str]) -> None:
        self.name = name
        self.cum_weights = list(accumulate(b.weight for b in mix.buckets))
        self.buckets = [(b.name, b.prompt_tokens[0], b.prompt_tokens[1]) for b in mix.buckets]
        self.output = mix.output_tokens
        self.system_prompt = system_prompts[0]
        self.system_prompts = system_prompts
        self.system_words = mix.system_prompt_tokens
        # Prompt tokens a chat server adds to each request (its template's markers); None without a tokenizer.
        self.overhead: int | None = None
        self.documents = documents
        docs = mix.documents
        self.doc_words = docs.tokens if docs is not None else 0
        self.per_request = docs.per_request if docs is not None else 0
        # Rank r (document r - 1) weighs 1 / r**s.
        self.doc_weights = [1.0 / (r**docs.zipf) for r in range(1, docs.pool + 1)] if docs is not None else []
        self.doc_cum = list(accumulate(self.doc_weights))
        self.structured = len(system_prompts) > 1 or bool(documents)


def mix_table(name: str, mix: MixDef, seed: int, pool: Sequence[str]) -> MixTable:
    """Mix `name`'s table, its system prompts and documents made of words of `pool` (one token each with a
    tokenizer), each from a seeded generator of its own."""
    system_prompts = []
    for j in range(mix.system_prompts):
        system_rng = random.Random(stable_int("system", seed, name) if j == 0 else stable_int("system", seed, name, j))
        system_prompts.append(" ".join(system_rng.choices(pool, k=mix.system_prompt_tokens)))
    documents = []
    if mix.documents is not None:
        for j in range(mix.documents.pool):
            doc_rng = random.Random(stable_int("document", seed, name, j))
            documents.append(" ".join(doc_rng.choices(pool, k=mix.documents.tokens)))
    return MixTable(name, mix, system_prompts, documents)
