"""Keeping the reply's text (`StreamAccumulator(keep_text=True)`): every dialect's fixture stream
(tests/unit/streams) gives its reply text and, per token chunk, where that chunk's text ends; keeping it changes
nothing else in the record, however the body is cut, and a kept stream reads on the Python path with the same
record the C fast path gives an unkept one."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from loadgen.client.connection import _Parser
from loadgen.measure.records import RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator, fast_path_available
from loadgen.protocol.dialects import DIALECT_NAMES, POOLING_DIALECTS, get_dialect
from loadgen.protocol.output_text import TEXT_DIALECTS, text_reader
from tests.unit.test_dialects_streams import event_ends, run, snapshot, t

STREAMS = Path(__file__).parent / "streams"
FIXTURES = sorted(p.stem for p in STREAMS.glob("*.txt"))

# What each fixture's server streamed as reply text, read off the fixture by hand (TGI's own `generated_text`
# agrees: " The sky ☀"). Reasoning (Ollama `thinking`) is not reply text; TGI's EOS `</s>` is a special token.
EXPECTED = {
    "llamacpp-limit": ("1, 2", [1, 2, 4]),
    "llamacpp-timings-per-token": (" Paris is the café", [6, 9, 13, 18, 18]),
    "ollama-chat-basic": ("The sky is blue.", [3, 7, 10, 16]),
    "ollama-generate-thinking": ("It is 4.", [0, 0, 2, 8]),
    "openai-chat-eos-no-content": ("Hello! 5 €", [5, 6, 10]),
    "openai-chat-llamacpp-final-usage": ("The sky is blue", [3, 7, 10, 15]),
    "openai-chat-llamacpp-timings": ("Hi there 😀!", [2, 8, 10, 11]),
    # The empty chunk whose count moved (a character held back) is a token chunk with no text of its own.
    "openai-chat-vllm-continuous": ("Bonjour à tous, 👋", [7, 15, 15, 17, 17]),
    "openai-completions-trtllm": (" Paris, the capital", [6, 7, 11, 19]),
    # Thinking deltas and a tool call's input pieces are token chunks without reply text.
    "anthropic-messages-api-thinking-tool": ("Let me check the weather.", [0, 0, 12, 25, 25, 25]),
    "openai-responses-llamacpp-eos": ("Yes.", [3, 4]),
    "openai-responses-llamacpp-timings": ("The café is called Caf", [3, 8, 11, 18, 22]),
    # A reasoning summary's deltas are token chunks without reply text; a tool call's arguments are no text either.
    "openai-responses-openai-incomplete": ("One, two", [0, 0, 3, 8]),
    "openai-responses-vllm-tool-call": ("", [0, 0, 0]),
    "tgi-eos": (" The sky ☀", [4, 8, 8, 10, 10]),
    "triton-trtllm": (" Machine learning is a", [8, 17, 20, 22]),
    "triton-vllm-counts": (" Triton serves models on 🚀.", [7, 24, 24, 26, 27]),
}


def _dialect_of(fixture: str) -> str:
    return max((d for d in DIALECT_NAMES if fixture.startswith(d + "-")), key=len)


def _kept(dialect: str, body: bytes, cuts: list[int]) -> RequestRecord:
    d = get_dialect(dialect)
    rec = RequestRecord("r", "v", "chat")
    acc = StreamAccumulator(rec, d, keep_text=True)
    acc.on_sent(100.0)
    prev = 0
    for i, c in enumerate([*cuts, len(body)]):
        if c > prev:
            acc.feed(101.0 + i, body[prev:c])
            prev = c
    acc.finish(200.0)
    return rec


def test_every_dialect_has_a_text_reader() -> None:
    # Every dialect that generates text (pooling replies, embeddings and rankings, have none).
    assert set(TEXT_DIALECTS) == set(DIALECT_NAMES) - set(POOLING_DIALECTS)
    with pytest.raises(ValueError, match="dialects with one: openai-chat"):
        text_reader("nope")


def test_every_success_fixture_has_an_expected_text() -> None:
    for name in FIXTURES:
        body = (STREAMS / f"{name}.txt").read_bytes()
        rec, _ = run(_dialect_of(name), body)
        assert (rec.error is None) == (name in EXPECTED), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_text_and_chunk_ends_of_each_fixture(name: str) -> None:
    dialect = _dialect_of(name)
    body = (STREAMS / f"{name}.txt").read_bytes()
    plain, plain_acc = run(dialect, body)
    assert plain.output_text == "" and plain.chunk_text_ends is None  # not kept unless asked
    text, ends = EXPECTED[name]
    for cuts in ([], list(range(1, len(body), 7)), list(range(1, len(body)))):
        rec = _kept(dialect, body, cuts)
        assert rec.output_text == text
        assert list(rec.chunk_text_ends or ()) == ends
        assert len(ends) == len(rec.chunk_times)
    # Keeping the text changes nothing else: the same timings, counts, usage and errors as without it.
    d = get_dialect(dialect)
    rec = RequestRecord("r", "v", "chat")
    acc = StreamAccumulator(rec, d, keep_text=True)
    acc.on_sent(100.0)
    ev_ends, prev = event_ends(body, d.framing), 0
    for i, b in enumerate(ev_ends):
        acc.feed(t(i), body[prev:b])
        prev = b
    acc.finish(t(len(ev_ends)))
    assert snapshot(rec, acc) == snapshot(plain, plain_acc)


def test_errors_keep_the_text_received_before_them() -> None:
    body = (STREAMS / "openai-chat-error-field.txt").read_bytes()
    rec = _kept("openai-chat", body, [])
    assert rec.error == "server_error" and rec.output_text == "Once upon"


def test_a_stream_cut_by_the_transport_keeps_its_text() -> None:
    rec = RequestRecord("r", "v", "chat")
    acc = StreamAccumulator(rec, get_dialect("llamacpp"), keep_text=True)
    acc.feed(1.0, b'data: {"content":"Hel","stop":false}\n\ndata: {"content":"lo","stop":false}\n\ndata: {"con')
    acc.fail(2.0, "timeout", "slow")
    assert rec.output_text == "Hello" and list(rec.chunk_text_ends or ()) == [3, 5]


# ---- the C fast path ------------------------------------------------------------------------------------------
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(payload: bytes) -> bytes:
    ev = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(ev), ev)


def _read(reads: list[bytes], keep_text: bool) -> tuple[RequestRecord, int]:
    """The reactor's way (C counter first where the stream has one); the record and the reads counted in C."""
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, get_dialect("openai-chat"), keep_text=keep_text)
    parser = _Parser(acc)
    counter = acc.make_chunk_counter()
    parser.chunk_counter = counter
    in_c = 0
    for i, data in enumerate(reads):
        if counter is not None and counter.armed:
            used = counter.try_count(float(i), data)
            if used == len(data):
                in_c += 1
                continue
            data = data[used:]
        if parser.on_read(float(i), data):
            break
    acc.finish(float(len(reads)))
    return rec, in_c


@pytest.mark.skipif(not fast_path_available(), reason="the C half is not built")
def test_a_kept_stream_reads_in_python_with_the_records_of_the_c_path() -> None:
    pieces = ["Hel", "lo", ' "wor', "ld\\n", " é漢🙂", ""]
    reads = [_HEAD + _chunk(b'{"choices":[{"delta":{"role":"assistant","content":""}}]}')]
    for n, p in enumerate(pieces, 1):
        obj = {"choices": [{"delta": {"content": p}}], "usage": {"prompt_tokens": 5, "completion_tokens": n}}
        reads.append(_chunk(orjson.dumps(obj)))
    reads += [_chunk(b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6}}'), _chunk(b"[DONE]")]
    reads.append(b"0\r\n\r\n")
    fast, in_c = _read(reads, keep_text=False)
    kept, in_c_kept = _read(reads, keep_text=True)
    assert in_c == len(pieces) + 1 and in_c_kept == 0  # the unkept stream's token and usage reads went through C
    assert kept.output_text == "".join(pieces) and fast.output_text == ""
    assert list(kept.chunk_text_ends or ()) == [3, 5, 10, 14, 18, 18]
    for field in ("chunk_times", "chunk_tokens", "token_source", "prompt_tokens", "output_tokens", "done", "error"):
        assert getattr(kept, field) == getattr(fast, field), field
