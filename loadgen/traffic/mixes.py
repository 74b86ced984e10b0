"""The built-in traffic mixes (from `loadgen.config.builtin_mixes`' table) as `MixDef`s, and resolving a scenario's
mixes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadgen.config.builtin_mixes import BUILTIN_MIX_NAMES, BUILTIN_TABLE
from loadgen.config.traffic import Bucket, Documents, MixDef
from loadgen.registry import Registry

if TYPE_CHECKING:
    from loadgen.config.traffic import Traffic

__all__ = ["BUILTIN_MIX_NAMES", "builtin_mixes", "resolve_mixes"]


def builtin_mixes() -> Registry[MixDef]:
    """A fresh registry of the built-in mixes (fresh, so callers may register more without affecting others)."""
    registry: Registry[MixDef] = Registry("mix")
    for name, description, system_tokens, buckets, output, system_prompts, docs, text in BUILTIN_TABLE:
        documents = None
        if docs is not None:
            pool, per_request, tokens, zipf = docs
            documents = Documents(pool=pool, per_request=per_request, tokens=tokens, zipf=zipf)
        mix = MixDef(
            buckets=[Bucket(name=b, prompt_tokens=(lo, hi), weight=w) for b, lo, hi, w in buckets],
            output_tokens=output,
            system_prompt_tokens=system_tokens,
            system_prompts=system_prompts,
            documents=documents,
            text=text,
            description=description,
        )
        registry.register(name, mix)
    return registry


def resolve_mixes(traffic: Traffic) -> dict[str, MixDef]:
    """The definitions of the mixes ``traffic`` references, in its order (custom ones from ``custom_mixes``)."""
    registry = builtin_mixes()
    for name, mix in traffic.custom_mixes.items():
        registry.register(name, mix)
    return {ref.name: registry.get(ref.name) for ref in traffic.mixes}
