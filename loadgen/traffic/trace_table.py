"""A replayed trace (``traffic.trace``) as the sampler's table: row ``k`` of the window is request ``k`` of the
open-loop stream, sent at the row's offset, asking for its output length, its prompt exactly its input length (in
the tokenizer's tokens when the scenario has one, else words).

A Mooncake row's prompt is its blocks in order: block id ``h`` is always the same text (a three-word tag drawn from
``h``, then a window of the sampler's word block at an offset drawn from ``h``), ``block_tokens`` long, the last
block cut to what the row's length leaves. Two rows whose first k ids agree therefore share exactly k blocks of
prefix and then differ (their next blocks open with different tags), which is what a prefix cache sees in
production. Tokens past the row's ids (a row with fewer ids than its length needs), and the whole prompt of a row
without ids (Azure, BurstGPT), are a block of the row's own. ``shared_prefix_tokens`` is the row's leading blocks
that an earlier row of the trace (in time order) already sent: what a prefix cache large enough would hit.

Built once per sampler; per request, a few hashes and slices of the word block (no loop over words).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from loadgen.traffic.dataset_table import length_class
from loadgen.traffic.trace_file import Trace

__all__ = ["TraceTable", "blocks_text"]

_TAG_WORDS = 3


def _draw(*parts: object) -> int:
    text = "\x1f".join(map(str, ("loadgen.trace", *parts)))
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class TraceTable:
    """A trace's window as ready-made request parts: lengths, block ids and predicted shared prefixes."""

    __slots__ = ("name", "rows", "block_tokens", "shared", "overhead")

    def __init__(self, name: str, trace: Trace, block_tokens: int) -> None:
        self.name = name
        self.rows = trace.rows
        self.block_tokens = block_tokens
        self.overhead: int | None = None
        seen: set[int] = set()
        shared: list[int] = []
        for row in trace.rows:
            k = 0
            while k < len(row.hash_ids) and row.hash_ids[k] in seen:
                k += 1
            shared.append(min(k * block_tokens, row.input_tokens))
            seen.update(row.hash_ids)
        self.shared = shared

    def __len__(self) -> int:
        return len(self.rows)

    def blocks(self, row_index: int) -> list[tuple[object, int]]:
        """Row ``row_index``'s prompt as (block key, tokens) in order: its ids' blocks, then a block of its own for
        whatever length they leave (none when they cover it)."""
        row = self.rows[row_index]
        left, size = row.input_tokens, self.block_tokens
        out: list[tuple[object, int]] = []
        for block_id in row.hash_ids:
            if left <= 0:
                break
            out.append((block_id, min(size, left)))
            left -= size
        if left > 0:
            out.append((("row", row.line), left))
        return out

    def prompt(self, row_index: int, words: Sequence[str], window: Callable[[int, int], str], span: int) -> str:
        """The prompt text: each block a tag of ``words`` drawn from its key, then ``window(start, n)`` of the
        sampler's block of ``span`` words."""
        return blocks_text(self.blocks(row_index), words, window, span)

    def parts(self, row_index: int) -> tuple[str, int, int, int]:
        """(bucket, prompt tokens, max_tokens, shared prefix tokens) of row ``row_index``."""
        row = self.rows[row_index]
        return length_class(row.input_tokens), row.input_tokens, row.output_tokens, self.shared[row_index]


def blocks_text(
    blocks: Sequence[tuple[object, int]], words: Sequence[str], window: Callable[[int, int], str], span: int
) -> str:
    """The text of (block key, tokens) blocks in order: each a tag of ``words`` drawn from its key, then
    ``window(start, n)`` of the sampler's block of ``span`` words; a block cut short is a prefix of the whole one."""
    parts = []
    n = len(words)
    for key, tokens in blocks:
        if tokens <= 0:
            continue
        d = _draw(key)
        tag_words = min(_TAG_WORDS, tokens)
        tag = " ".join([words[(d >> (21 * k)) % n] for k in range(tag_words)])
        rest = tokens - tag_words
        parts.append(f"{tag} {window(d % span, rest)}" if rest else tag)
    return " ".join(parts)
