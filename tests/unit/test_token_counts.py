"""Per-chunk token counts from a tokenizer (measure/token_counts.py): each token of the whole reply goes to the chunk
whose text holds its last character; a count that cannot be right (a chunk left without a token, a total far from
the server's usage) leaves the record as it was."""

from __future__ import annotations

from array import array

import pytest
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from loadgen.measure.records import RequestRecord, TokenSource
from loadgen.measure.token_counts import apply_token_ends, chunk_counts, needs_text
from loadgen.traffic.tokenizer import PromptTokenizer


def _byte_bpe(corpus: list[str], vocab_size: int = 400) -> PromptTokenizer:
    """A byte-level BPE (GPT-2 style) trained on `corpus`: characters it never saw become one token per byte."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(corpus * 20, trainer)
    return PromptTokenizer("test", "tokenizer.json", tok, False, None, None)


def _record(pieces: list[str], usage: int | None, source: str = TokenSource.USAGE_SPREAD) -> RequestRecord:
    """A finished record whose token chunks carried `pieces` (one chunk each, 10 ms apart)."""
    rec = RequestRecord("r", "v", "m", sent=0.0, done=1.0, output_tokens=usage, token_source=source)
    rec.output_text = "".join(pieces)
    rec.chunk_text_ends = array("l")
    end = 0
    for i, p in enumerate(pieces):
        end += len(p)
        rec.chunk_text_ends.append(end)
        rec.chunk_times.append(0.1 + 0.01 * i)
        rec.chunk_tokens.append(1)
    return rec


def test_each_token_goes_to_the_chunk_holding_its_end() -> None:
    assert chunk_counts([2, 4], [1, 2, 4]) == [2, 1]
    assert chunk_counts([4, 8, 12], [4, 8, 12]) == [1, 1, 1]
    # Text after the last token chunk (chunks that carried no token) is counted with the last one.
    assert chunk_counts([4, 8], [4, 8, 10]) == [1, 2]
    assert chunk_counts([], [1]) is None


def test_a_chunk_left_without_a_token_means_no_count() -> None:
    # A token straddling two chunks ("hel" | "lo"): the first chunk's text ends inside it.
    assert chunk_counts([3, 5], [5]) is None
    # An empty token chunk (a chunk whose count moved with no text: not countable from text).
    assert chunk_counts([3, 3, 6], [3, 6]) is None


def test_multibyte_characters_split_over_several_tokens_stay_with_their_chunk() -> None:
    tok = _byte_bpe(["the sky is blue and the sea is green"])
    pieces = [" the", " sky é", "漢🙂", " blue"]
    ends = tok.token_ends("".join(pieces))
    # The unseen characters are one token per UTF-8 byte: é 2, 漢 3, 🙂 4 tokens, each ending at its character.
    assert len(ends) == 1 + 1 + 1 + 2 + 3 + 4 + 1
    rec = _record(pieces, usage=len(ends))
    assert apply_token_ends(rec, ends)
    assert list(rec.chunk_tokens) == [1, 4, 7, 1] and rec.token_source == TokenSource.TOKENIZER
    # Tokenizing each chunk alone agrees here, and the sum is the reply's count.
    assert [tok.count(p) for p in pieces] == [1, 4, 7, 1]


def test_the_whole_reply_tokenized_is_exact_where_chunks_alone_are_not() -> None:
    tok = _byte_bpe(["hello world hello world"], vocab_size=300)
    assert tok.count(" hello") == 1 and tok.count(" hel") + tok.count("lo") == 3
    # Two chunks ("... hel" | "lo"): tokenized alone they count 1 + 2 + 1 = 4 tokens; the reply has 2.
    rec = _record([" world hel", "lo"], usage=2)
    ends = tok.token_ends(rec.output_text)
    assert len(ends) == 2
    # The straddling token leaves the first chunk's own " world" alone with it: [1, 1].
    assert apply_token_ends(rec, ends) and list(rec.chunk_tokens) == [1, 1]
    # One straddling token across a chunk that has nothing else: not countable, the record keeps its counts.
    rec = _record([" hel", "lo"], usage=1, source=TokenSource.ONE_PER_CHUNK)
    assert not apply_token_ends(rec, tok.token_ends(rec.output_text))
    assert list(rec.chunk_tokens) == [1, 1] and rec.token_source == TokenSource.ONE_PER_CHUNK


def test_the_usage_total_must_agree() -> None:
    pieces = [" a b c d"] * 10  # 4 tokens a chunk, 40 in all
    ends = [2 * (i + 1) for i in range(40)]
    for usage, used in ((40, True), (41, True), (None, True), (40 - 1, False), (43, False), (48, False)):
        rec = _record(pieces, usage)
        assert apply_token_ends(rec, ends) is used, usage
        assert rec.token_source == (TokenSource.TOKENIZER if used else TokenSource.USAGE_SPREAD)
    # Within 2 % of a long reply's total: taken (a few non-canonical tokens in the model's own output).
    long_ends = [i + 1 for i in range(1000)]
    rec = _record(["x" * 100] * 10, usage=1015)
    assert apply_token_ends(rec, long_ends)


def test_tpot_uses_the_tokens_the_chunks_carried() -> None:
    # 4 tokens per chunk every 40 ms; the server's usage counts one more (EOS, streamed without text).
    rec = _record([" a b c d"] * 10, usage=41)
    rec.chunk_times[:] = array("d", [0.1 + 0.04 * i for i in range(10)])
    assert apply_token_ends(rec, [2 * (i + 1) for i in range(40)])
    assert rec.tpot == pytest.approx(0.36 / 36)  # span over the 36 tokens after the first chunk: 10 ms
    assert rec.output_token_count == 41  # totals stay the server's
    assert [round(g, 4) for g, _ in rec.itl_samples()] == [0.01] * 9


def test_server_counts_are_never_replaced() -> None:
    rec = _record([" a b", " c"], usage=3, source=TokenSource.SERVER)
    rec.chunk_tokens[:] = array("l", [2, 1])
    assert not apply_token_ends(rec, [2, 4, 6])
    assert list(rec.chunk_tokens) == [2, 1] and rec.token_source == TokenSource.SERVER
    unkept = RequestRecord("r", "v", "m")
    assert not apply_token_ends(unkept, [])


def test_which_streams_keep_text_for_counting() -> None:
    assert needs_text("tok.json", "openai-chat", False)
    assert needs_text("tok.json", "ollama-chat", False) and needs_text("tok.json", "triton", False)
    assert not needs_text("tok.json", "openai-chat", True)  # vLLM streams counts: the C read path stays
    assert not needs_text("tok.json", "tgi", False) and not needs_text("tok.json", "llamacpp", False)
    assert not needs_text(None, "openai-chat", False) and not needs_text("server", "openai-chat", False)
