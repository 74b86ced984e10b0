"""LoRA adapters a variant's requests are spread over (`variants[].adapters`): each request's `model` is one of
them, drawn by share, as a multi-LoRA server (vLLM `--enable-lora --lora-modules name=path`, SGLang `--lora-paths`)
serves them under their names beside the base model.

Which adapter a request names is drawn from the request's identity (seed, stream, index) by a hash of its own,
apart from every other draw (traffic/sampler.py's): the prompts, lengths, mixes and classes are the same with
adapters or without, and every variant that lists the same adapters with the same shares sends the same request to
the same adapter, whatever its workers or their order (`AdapterPlan.draw`). A session's turns keep the adapter of
the request that opened it (they share its index): a conversation stays on one model.

The base model takes a share when the variant's own `model` is listed among the adapters: then that name is sent
as it is. For the draw it counts as "the base" rather than by its name, so two variants whose base models are named
differently still pair request for request.
"""

from __future__ import annotations

import hashlib
import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from typing import Annotated, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from loadgen.config.errors import SubpathIssues
from loadgen.config.types import PositiveFloat

__all__ = ["ADAPTER_NAME_PATTERN", "Adapter", "AdapterPlan", "Adapters", "adapter_slo_issues"]

# What servers accept as a served name: Hugging Face ids (`org/name`), Ollama tags (`name:tag`), plain names.
ADAPTER_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:/@+=-]{0,255}$"
_TWO_53 = float(1 << 53)


class Adapter(BaseModel):
    """One LoRA adapter (or the base model) and its share of the variant's requests."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=ADAPTER_NAME_PATTERN,
        description="The name the server serves the adapter under, sent as the request's `model` (vLLM: the name "
        "of `--lora-modules name=path`); the variant's own `model` here is the base model.",
    )
    share: PositiveFloat = Field(
        default=1.0,
        description="Relative share of the variant's requests sent to it (weights: they need not sum to 1).",
    )


def _distinct(adapters: list[Adapter]) -> list[Adapter]:
    issues: list[tuple[tuple[str | int, ...], str]] = []
    seen: set[str] = set()
    for i, a in enumerate(adapters):
        if a.name in seen:
            issues.append(((i, "name"), f"adapter {a.name!r} is listed twice"))
        seen.add(a.name)
    if issues:
        raise SubpathIssues(issues)
    return adapters


Adapters = Annotated[list[Adapter], AfterValidator(_distinct)]


class _VariantLike(Protocol):
    name: str
    adapters: list[Adapter]


def adapter_slo_issues(
    i: int, adapter: str, variant: str | None, variants: Sequence[_VariantLike]
) -> list[tuple[tuple[str | int, ...], str]]:
    """What is wrong with SLO `i` naming `adapter` (for `variant`, or every variant): it must be one the variant
    lists (judged there), or with no variant one some variant lists (judged on each that does)."""
    scope = [v for v in variants if variant is None or v.name == variant]
    listed = sorted({a.name for v in scope for a in v.adapters})
    if adapter in listed:
        return []
    where = f"variant {variant!r} does not list" if variant is not None else "no variant lists"
    lists = f"adapters listed: {listed}" if listed else "no adapters are listed (variants[].adapters)"
    return [(("slos", i, "adapter"), f"{where} adapter {adapter!r}; {lists}")]


class AdapterPlan:
    """A variant's adapters and the scenario's seed: the `model` each request of the variant names."""

    __slots__ = ("_cum", "_names", "_seed")

    def __init__(self, adapters: list[Adapter], seed: int, base_model: str) -> None:
        # Ordered by key, the base model's key being "" (before any name): a request's adapter depends neither on
        # the order they are listed in nor on what the base model is called.
        keyed = sorted(("" if a.name == base_model else a.name, a) for a in adapters)
        for _, a in keyed:
            if not (a.share > 0 and math.isfinite(a.share)):
                raise ValueError(f"adapter {a.name!r} has share {a.share!r}; shares must be finite and > 0")
        self._names = [a.name for _, a in keyed]
        self._cum = list(accumulate(a.share for _, a in keyed))
        self._seed = seed

    def draw(self, stream: int, index: int) -> str:
        """The model name request `index` of stream `stream` sends (the same for each of its session's turns)."""
        if len(self._names) == 1:
            return self._names[0]
        digest = hashlib.blake2b(f"{self._seed}\x1f{stream}\x1f{index}\x1fa".encode(), digest_size=8).digest()
        # 53 bits keep the fraction exactly below 1; the min() guards the rounding of the product.
        u = (int.from_bytes(digest, "big") >> 11) / _TWO_53 * self._cum[-1]
        return self._names[min(bisect_right(self._cum, u), len(self._names) - 1)]
