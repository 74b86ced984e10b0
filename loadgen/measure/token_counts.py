"""Per-chunk token counts from a tokenizer, for streams whose server sends no counts (vLLM without
`continuous_usage_stats`, most hosted APIs): exact per-token ITL and TPOT with several tokens per chunk.

Off the hot path: the runtime's recorder (idle priority, before a record is aggregated) tokenizes the reply's whole
text once, with offsets, and gives each token to the chunk whose text holds the token's last character
(`RequestRecord.chunk_text_ends`). Tokenizing the whole text, not each chunk alone, is what makes the count exact
at chunk boundaries: a chunk's text tokenized by itself can split a token the whole text keeps together (or merge
across a boundary the model never crossed), so the sum of per-chunk counts drifts from the reply's.

When the tokenizer's counts are not used, the record keeps the counts it had (usage spread, or one per chunk):
- a token chunk that gets no token (its text is empty, or only the start of a token that ends in a later chunk):
  the text and the server's tokens do not line up (reasoning or tool-call chunks, whose text is not kept, or a
  tokenizer that is not the server's);
- the tokenizer's total disagrees with the server's usage total by more than `_TOLERANCE` (plus one for the EOS
  token servers count without streaming text): it is not the server's tokenizer.
Either way the server's usage total stays the record's output token count (totals, throughput): the tokenizer
decides only how the tokens spread over the chunks.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Sequence

from loadgen.measure.records import RequestRecord, TokenSource

__all__ = ["apply_token_ends", "chunk_counts", "needs_text"]

# Relative disagreement with the usage total beyond which the tokenizer is taken not to be the server's.
_TOLERANCE = 0.02
# Dialects whose servers stream counts with every chunk whatever the request says (TGI's token index, llama.cpp's
# tokens_predicted): their streams never need text to be counted.
_ALWAYS_COUNTED = frozenset({"tgi", "llamacpp"})


def needs_text(tokenizer: str | None, dialect: str, continuous_usage_stats: bool) -> bool:
    """Whether a variant's streams keep their text for the scenario's tokenizer (a local one: `tokenizer: server`
    has none to count with here) to count: not where the server is known to stream counts itself (asked for with
    `continuous_usage_stats`, or a dialect that always does), since a kept stream loses the C read path."""
    if tokenizer is None or tokenizer == "server":
        return False
    return not continuous_usage_stats and dialect not in _ALWAYS_COUNTED


def chunk_counts(chunk_ends: Sequence[int], token_ends: Sequence[int]) -> list[int] | None:
    """Tokens per chunk: token j (its text ending at character `token_ends[j]` of the reply) belongs to the first
    chunk whose text reaches that far (`chunk_ends[i] >= token_ends[j]`); a token ending past the last chunk's text
    (text of chunks that carried no token, after it) to the last chunk. None when some chunk gets no token."""
    n = len(chunk_ends)
    if n == 0:
        return None
    counts = [0] * n
    last = n - 1
    for end in token_ends:
        i = bisect_left(chunk_ends, end)
        counts[i if i < n else last] += 1
    return None if 0 in counts else counts


def apply_token_ends(rec: RequestRecord, token_ends: Sequence[int]) -> bool:
    """Set `rec`'s per-chunk counts from its reply's token ends (`PromptTokenizer.token_ends(rec.output_text)`)
    where that is right (see the module docstring); True when they were set (`TokenSource.TOKENIZER`)."""
    ends = rec.chunk_text_ends
    if ends is None or rec.token_source == TokenSource.SERVER or len(ends) != len(rec.chunk_times):
        return False
    counts = chunk_counts(ends, token_ends)
    if counts is None:
        return False
    usage = rec.output_tokens
    if usage is not None:
        total = len(token_ends)
        if not (total <= usage <= total + 1) and abs(usage - total) > _TOLERANCE * usage:
            return False
    rec.chunk_tokens[:] = array("l", counts)
    rec.token_source = TokenSource.TOKENIZER
    return True
