"""The built-in traffic mixes (chat, rag, code, agent) as data: DESIGN.md's reference workloads.

Bucket bounds and weights follow DESIGN.md's reference table. The shared system prompts are our choice: a short
instruction for chat, a long one for rag (instructions plus a retrieval preamble reused across questions: what
prefix caching feeds on), a medium one for code. Each is shorter than its mix's shortest prompt, since it counts
toward the prompt length. Chat draws from 8 system prompts (assistants deployed with a few personas), rag and
code have one each. Code questions are source code (`text: code`: indented lines of identifiers, keywords and
operators, traffic/code_text.py); the others are prose.

rag carries retrieved documents: each request is its system prompt + 4 distinct documents of 250 tokens drawn from
a seeded pool of 200 by Zipf(1) popularity (popular documents recur, as in real retrieval: what a prefix cache
feeds on) + a question that fills the rest of the drawn length. The buckets stay the reference ones, so a request
too short for 4 documents plus a 16-token question takes as many as fit: a short request (200-500 tokens, 150 of
them the system prompt) carries one document from 416 tokens on and none below; a medium one (500-2000) one to
four; every long one (2000-8000) four, its question the rest.

agent is a coding agent's task (config/agent.py): a long shared system prompt (instructions and tool descriptions,
the same for every task: what a prefix cache keeps), a task of repository snippets and an instruction, and short
replies (tool calls); its later steps grow from there.

Plain data, so the scenario model can check mix names against it without importing the traffic stage;
`loadgen.traffic.mixes` builds the `MixDef`s from it.
"""

from __future__ import annotations

from typing import Literal

__all__ = ["BUILTIN_MIX_NAMES", "BUILTIN_TABLE", "TextKind"]

# What a mix's questions are made of (MixDef.text).
TextKind = Literal["prose", "code"]

# Documents: (pool, per request, tokens each, Zipf exponent), or None.
DocumentsRow = tuple[int, int, int, float] | None
# name, description, system prompt tokens, buckets (name, min, max, weight), output tokens (min, max),
# system prompts, documents, text ("prose" | "code")
BUILTIN_TABLE: tuple[
    tuple[str, str, int, tuple[tuple[str, int, int, float], ...], tuple[int, int], int, DocumentsRow, TextKind], ...
] = (
    (
        "chat",
        "Conversational assistant: mostly short prompts, short to medium answers.",
        40,
        (("short", 50, 200, 0.7), ("medium", 200, 1000, 0.2), ("long", 1000, 4000, 0.1)),
        (50, 500),
        8,
        None,
        "prose",
    ),
    (
        "rag",
        "Retrieval-augmented answers: long prompts of retrieved context behind a shared instruction prefix.",
        150,
        (("short", 200, 500, 0.2), ("medium", 500, 2000, 0.4), ("long", 2000, 8000, 0.4)),
        (100, 800),
        1,
        (200, 4, 250, 1.0),
        "prose",
    ),
    (
        "code",
        "Code assistant: source files in the prompt, long generated answers.",
        80,
        (("short", 100, 300, 0.3), ("medium", 300, 1500, 0.4), ("long", 1500, 6000, 0.3)),
        (200, 2000),
        1,
        None,
        "code",
    ),
    (
        "agent",
        "Coding agent: tasks of many steps over a growing context of code, tool calls and their results "
        "(sent as agent sessions: `traffic.mixes[].agent`).",
        2000,
        (("task", 2500, 8000, 1.0),),
        (50, 500),
        1,
        None,
        "code",
    ),
)

BUILTIN_MIX_NAMES: tuple[str, ...] = tuple(entry[0] for entry in BUILTIN_TABLE)
