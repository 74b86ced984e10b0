"""Chunked transfer decoding: the body and the end come out the same however the bytes are split."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.protocol.chunked import ChunkedDecoder, ChunkedError


def _encode(pieces: list[bytes], ext: bytes = b"", trailers: bytes = b"") -> bytes:
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(p), ext, p) for p in pieces if p)
    return out + b"0%s\r\n%s\r\n" % (ext, trailers)


def _decode(reads: list[bytes]) -> tuple[bytes, bool, bytes]:
    dec = ChunkedDecoder()
    body = b""
    for r in reads:
        body += b"".join(dec.feed(r))
    return body, dec.complete, dec.extra


def _every_split(data: bytes) -> list[list[bytes]]:
    """Two reads cut at every point, and one byte per read."""
    return [[data[:i], data[i:]] for i in range(len(data) + 1)] + [[data[i : i + 1] for i in range(len(data))]]


@pytest.mark.parametrize(
    ("ext", "trailers"),
    [(b"", b""), (b";name=value", b""), (b" ;a", b"X-Checksum: 1\r\nX-Other: two\r\n")],
)
def test_body_and_end_at_every_split(ext: bytes, trailers: bytes) -> None:
    pieces = [b"data: {}\n\n", b"x" * 300, b"\r\n\r\n", b"0\r\n"]
    wire = _encode(pieces, ext, trailers)
    for reads in _every_split(wire):
        assert _decode(reads) == (b"".join(pieces), True, b""), reads


def test_common_read_is_one_piece_and_the_end_is_seen() -> None:
    dec = ChunkedDecoder()
    assert dec.feed(b"a\r\n0123456789\r\n") == [b"0123456789"]
    assert dec.feed(b"3\r\nabc\r\n4\r\ndefg\r\n") == [b"abc", b"defg"]
    assert not dec.complete
    assert dec.feed(b"0\r\n\r\n") == []
    assert dec.complete


def test_bytes_after_the_end_are_kept_as_extra() -> None:
    assert _decode([b"1\r\na\r\n0\r\n\r\nHTTP/1.1 200"]) == (b"a", True, b"HTTP/1.1 200")


@pytest.mark.parametrize(
    "wire",
    [
        b"zz\r\nab\r\n",  # not hex
        b"0x2\r\nab\r\n",  # no prefixes
        b"\r\nab\r\n",  # empty size
        b"1_0\r\n",  # Python's int() would take it
        b"2\r\nabXY",  # data not followed by CRLF
        b"2\r\nab\rX",
        b"1" * 20 + b"\r\n",  # size beyond 64 bits
    ],
)
def test_malformed_framing_raises(wire: bytes) -> None:
    for reads in _every_split(wire):
        with pytest.raises(ChunkedError):
            _decode(reads)


def test_an_endless_size_line_is_refused() -> None:
    dec = ChunkedDecoder()
    with pytest.raises(ChunkedError, match="too long"):
        for _ in range(10):
            dec.feed(b"1" * 1000)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(min_size=1, max_size=40), max_size=8),
    st.lists(st.integers(min_value=0, max_value=10_000), max_size=6),
)
def test_split_invariance(pieces: list[bytes], cuts: list[int]) -> None:
    wire = _encode(pieces)
    points = sorted({c % (len(wire) + 1) for c in cuts})
    reads = [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True)]
    assert _decode(reads) == (b"".join(pieces), True, b"")


def test_lone_events_take_whole_chunks_of_one_data_line_each() -> None:
    ev = b'data: {"x":1}\n\n'
    one = b"%x\r\n%s\r\n" % (len(ev), ev)
    assert ChunkedDecoder().lone_events(one) == ([b'{"x":1}'], b"")
    assert ChunkedDecoder().lone_events(one + one + b"0\r\n\r\n") == ([b'{"x":1}'] * 2, b"0\r\n\r\n")
    # An event's type line (the Responses and Messages APIs name every event): the payload all the same.
    named = b"%x\r\nevent: e\n%s\r\n" % (len(ev) + 9, ev)
    assert ChunkedDecoder().lone_events(named + one + named) == ([b'{"x":1}'] * 3, b"")
    for other in [
        b"%x\r\n%s\r\n" % (len(ev) + 1, ev + b"\n"),  # size that does not match
        b"%x\r\nevent: e\n%s\r\n" % (len(ev) + 8, ev),  # nor with an event type
        b"%x\r\nevent: error\n%s\r\n" % (len(ev) + 13, ev),  # an error event: the SSE parser names it
        b"%x\r\nevent: e\r\n%s\r\n" % (len(ev) + 10, ev),  # a CR is a line end in SSE
        b"%x\r\nevent:e\n%s\r\n" % (len(ev) + 8, ev),  # no space: the SSE parser's to read
        b"%x\r\nid: 1\n%s\r\n" % (len(ev) + 6, ev),  # any other field
        b"%x\r\ndata: a\rb\n\n\r\n" % 11,  # a CR is a line end in SSE
        b"%x;ext\r\n%s\r\n" % (len(ev), ev),  # chunk extension
        one[:-1],
    ]:
        assert ChunkedDecoder().lone_events(other) == ([], other), other
        assert ChunkedDecoder().lone_events(one + other) == ([b'{"x":1}'], other), other
    mid = ChunkedDecoder()
    mid.feed(one[:3])  # not at a chunk boundary
    assert mid.lone_events(one) == ([], one)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from([b"data: {}\n\n", b"data: [DONE]\n\n", b"data: a\n\n\n", b": c\n\n", b"x"]),
        max_size=6,
    )
)
def test_lone_events_then_feed_give_the_body(events: list[bytes]) -> None:
    wire = _encode(events)
    dec = ChunkedDecoder()
    payloads, rest = dec.lone_events(wire)
    body = b"".join(b"data: %s\n\n" % p for p in payloads) + b"".join(dec.feed(rest))
    assert body == b"".join(events) and dec.complete


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([b"", b"event: e\n", b"event: response.output_text.delta\n"]), max_size=6))
def test_named_and_unnamed_events_alike(names: list[bytes]) -> None:
    wire = _encode([name + b'data: {"d":%d}\n\n' % i for i, name in enumerate(names)])
    payloads, rest = ChunkedDecoder().lone_events(wire)
    assert payloads == [b'{"d":%d}' % i for i in range(len(names))] and rest == b"0\r\n\r\n"
