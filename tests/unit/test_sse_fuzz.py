"""Property tests: the SSE parser and the stream accumulator never raise, and splitting never changes the result."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect
from loadgen.protocol.sse import SSEParser

_sse_atoms = st.sampled_from(
    [
        b"data: ",
        b"data:",
        b"event: error\n",
        b": ping\n",
        b"\n",
        b"\r\n",
        b"\r",
        b"\n\n",
        b'{"choices":[{"delta":{"content":"x"}}]}',
        b'{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}',
        b'{"error":{"message":"boom"}}',
        b"[DONE]",
        b'{"choices":[{"delta":',
        b"\xff\xfe",
        b"id: 3\n",
    ]
)
_streams = st.lists(st.one_of(_sse_atoms, st.binary(max_size=12)), max_size=40).map(b"".join)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    pieces, prev = [], 0
    for p in points:
        pieces.append(data[prev:p])
        prev = p
    pieces.append(data[prev:])
    return pieces


@settings(max_examples=300, deadline=None)
@given(_streams, st.lists(st.integers(min_value=0, max_value=10_000), max_size=8))
def test_sse_split_invariance_and_no_exceptions(data: bytes, cuts: list[int]) -> None:
    whole = SSEParser()
    expected = whole.feed(data)
    split = SSEParser()
    got = []
    for piece in _split(data, cuts):
        got += split.feed(piece)
    assert got == expected
    assert split.close() == whole.close()


@settings(max_examples=300, deadline=None)
@given(_streams, st.lists(st.integers(min_value=0, max_value=10_000), max_size=8))
def test_accumulator_never_raises_and_always_classifies(data: bytes, cuts: list[int]) -> None:
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, get_dialect("openai-chat"))
    acc.on_sent(0.0)
    for i, piece in enumerate(_split(data, cuts)):
        acc.feed(1.0 + i, piece)
    acc.finish(99.0)
    assert rec.error is None or rec.error in ErrorKind.ALL
    assert rec.ok == acc.saw_done
    assert len(rec.chunk_times) == len(rec.chunk_tokens)
    assert all(k > 0 for k in rec.chunk_tokens)
