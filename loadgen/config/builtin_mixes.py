"""The built-in traffic mixes (chat, rag, code) as data: DESIGN.md's reference workloads.

Bucket bounds and weights follow DESIGN.md's reference table. The shared system prompts are our choice: a short
instruction for chat, a long one for rag (instructions plus a retrieval preamble reused across questions: what
prefix caching feeds on), a medium one for code. Each is shorter than its mix's shortest prompt, since it counts
toward the prompt length. Plain data, so the scenario model can check mix names against it without importing the
traffic stage; `loadgen.traffic.mixes` builds the `MixDef`s from it.
"""

from __future__ import annotations

__all__ = ["BUILTIN_MIX_NAMES", "BUILTIN_TABLE"]

# name, description, system prompt tokens, buckets (name, min, max, weight), output tokens (min, max)
BUILTIN_TABLE: tuple[tuple[str, str, int, tuple[tuple[str, int, int, float], ...], tuple[int, int]], ...] = (
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

BUILTIN_MIX_NAMES: tuple[str, ...] = tuple(entry[0] for entry in BUILTIN_TABLE)
