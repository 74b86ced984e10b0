"""The C half of the read (_wire.c) against captured streams cut at every byte: whatever the TokenChunkCounter takes
of a read (the leading whole chunks, the end of the stream), the record is the Python path's, byte for byte.

Each captured body (tests/unit/streams/, from vLLM, llama.cpp, TensorRT-LLM, OpenAI and Anthropic) is framed as a
server frames it: one HTTP chunk per SSE event (vLLM, SGLang, llama.cpp), or several events per chunk (bench/server.py
writes a reply's last token, its usage and `[DONE]` as one chunk); then the reads are cut at every byte offset."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.protocol.accumulator import fast_path_available

from .test_wire import _HEAD, _run

_STREAMS = Path(__file__).parent / "streams"
_DIALECTS = ("openai-chat", "openai-completions", "openai-responses", "anthropic-messages")
_CASES = sorted(p.name for p in _STREAMS.glob("*.txt") if p.name.startswith(_DIALECTS))

pytestmark = pytest.mark.skipif(not fast_path_available(), reason="the C half is not built")


def _dialect(name: str) -> str:
    return next(d for d in _DIALECTS if name.startswith(d))


def _framed(body: bytes, per_chunk: int) -> tuple[bytes, list[int]]:
    """The response as a server writes it: the head, `per_chunk` events to an HTTP chunk, the terminator; and
    where each chunk (the head with the first one) ends."""
    events = [e + b"\n\n" for e in body.split(b"\n\n") if e.strip()]
    wire, ends = _HEAD, []
    for i in range(0, len(events), per_chunk):
        data = b"".join(events[i : i + per_chunk])
        wire += b"%x\r\n%s\r\n" % (len(data), data)
        ends.append(len(wire))
    wire += b"0\r\n\r\n"
    ends.append(len(wire))
    return wire, ends


def _reads(wire: bytes, cuts: set[int]) -> list[bytes]:
    points = [0, *sorted(c for c in cuts if 0 < c < len(wire)), len(wire)]
    return [wire[a:b] for a, b in zip(points, points[1:], strict=False)]


def _same(reads: list[bytes], dialect: str) -> int:
    slow, _ = _run(reads, dialect, fast=False)
    fast, counted = _run(reads, dialect, fast=True)
    assert fast == slow, reads
    return counted


@pytest.mark.parametrize("per_chunk", [1, 3])
@pytest.mark.parametrize("name", _CASES)
def test_every_cut_gives_the_python_record(name: str, per_chunk: int) -> None:
    dialect = _dialect(name)
    wire, ends = _framed((_STREAMS / name).read_bytes(), per_chunk)
    for k in range(1, len(wire)):
        if per_chunk == 1:
            # One read per chunk, one of them cut at k: a chunk split across reads, anywhere.
            _same(_reads(wire, {*ends, k}), dialect)
        # The first chunk, then the rest in two reads cut at k: the counter takes the leading whole chunks of a
        # read and hands the rest on (its end too), wherever the read stops.
        _same(_reads(wire, {ends[0], k}), dialect)


def test_the_end_of_a_vllm_stream_is_counted_in_c() -> None:
    # vLLM's end: the finish_reason chunk, the usage-only chunk and [DONE], each a chunk, with the terminator in
    # one read: all but the terminator counted in C, the record as Python's.
    wire, ends = _framed((_STREAMS / "openai-chat-vllm-continuous.txt").read_bytes(), 1)
    reads = _reads(wire, set(ends[:-4]))
    assert reads[-1].startswith(b"1") and reads[-1].endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    assert _same(reads, "openai-chat") == len(reads) - 2  # all but the head's read and the last (in part)
    # [DONE] alone at the end of a read stays Python's (so Python sees the end of the stream as it comes).
    reads = _reads(wire, set(ends[:-1]))
    assert _same(reads, "openai-chat") == len(reads) - 3


def test_the_last_chunk_of_bench_server_is_counted_in_c() -> None:
    # bench/server.py: the last token (finish_reason), the usage and [DONE] are one chunk, the terminator after it.
    body = (_STREAMS / "openai-chat-vllm-continuous.txt").read_bytes()
    wire, ends = _framed(body, 100)
    assert len(ends) == 2
    assert _same([_HEAD, wire[len(_HEAD) :]], "openai-chat") == 0  # one read: counted in C but for the terminator
