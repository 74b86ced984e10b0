"""Built-in traffic mixes (chat, rag, code) from the reference workloads, and resolving a scenario's mixes.

Bucket bounds and weights follow DESIGN.md's reference table. The shared system prompts are our choice: a short
instruction for chat, a long one for rag (instructions plus a retrieval preamble reused across questions: what
prefix caching feeds on), a medium one for code. Each is shorter than its mix's shortest prompt, since it counts
toward the prompt length.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadgen.config.scenario import Bucket, MixDef
from loadgen.registry import Registry

if TYPE_CHECKING:
    from loadgen.config.scenario import Traffic

__all__ = ["BUILTIN_MIX_NAMES", "builtin_mixes", "resolve_mixes"]

# name, description, system prompt tokens, buckets (name, min, max, weight), output tokens (min, max)
_BUILTIN: tuple[tuple[str, str, int, tuple[tuple[str, int, int, float], ...], tuple[int, int]], ...] = (
    (
        "chat",
        "Conversational assistant: mostly short prompts, short to medium answers.",
        40,
        (("short", 50, 200, 0.7), ("medium", 200, 1000, 0.2), ("long", 1000, 4000, 0.1)),
        (50, 500),
    ),
    (
        "rag",
        "Retrieval-augmented answers: long prompts of retrieved context behind a shared instruction prefix.",
        150,
        (("short", 200, 500, 0.2), ("medium", 500, 2000, 0.4), ("long", 2000, 8000, 0.4)),
        (100, 800),
    ),
    (
        "code",
        "Code assistant: source files in the prompt, long generated answers.",
        80,
        (("short", 100, 300, 0.3), ("medium", 300, 1500, 0.4), ("long", 1500, 6000, 0.3)),
        (200, 2000),
    ),
)

BUILTIN_MIX_NAMES: tuple[str, ...] = tuple(entry[0] for entry in _BUILTIN)


def builtin_mixes() -> Registry[MixDef]:
    """A fresh registry of the built-in mixes (fresh, so callers may register more without affecting others)."""
    registry: Registry[MixDef] = Registry("mix")
    for name, description, system_tokens, buckets, output in _BUILTIN:
        mix = MixDef(
            buckets=[Bucket(name=b, prompt_tokens=(lo, hi), weight=w) for b, lo, hi, w in buckets],
            output_tokens=output,
            system_prompt_tokens=system_tokens,
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
