"""The response parser of the streaming connection: head by llhttp, chunked body de-chunked by loadgen, at every
split of the bytes; other bodies (error pages, Content-Length) still through llhttp."""

from __future__ import annotations

import pytest

from loadgen.client.connection import _Parser
from loadgen.protocol.chunked import ChunkedError


class _Sink:
    def __init__(self) -> None:
        self.finished = False
        self.fatal = False
        self.body = b""
        self.times: list[float] = []
        self.sse_idle = False

    def on_sent(self, t: float) -> None:
        pass

    def on_head(self, content_type: str) -> None:
        self.content_type = content_type

    def feed(self, t: float, data: bytes) -> None:
        self.body += data
        self.times.append(t)


_EVENTS = [b'data: {"n":%d}\n\n' % i for i in range(3)] + [b"data: [DONE]\n\n"]
_CHUNKED = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in _EVENTS) + b"0\r\n\r\n"
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _parse(reads: list[bytes]) -> tuple[_Parser, _Sink]:
    sink = _Sink()
    p = _Parser(sink)
    for i, r in enumerate(reads):
        p.now = float(i)
        p.parse(r)
    return p, sink


def _splits(data: bytes) -> list[list[bytes]]:
    return [[data[:i], data[i:]] for i in range(1, len(data))] + [[data[i : i + 1] for i in range(len(data))]]


@pytest.mark.parametrize(
    "wire",
    [
        _HEAD + _CHUNKED,
        b"HTTP/1.1 100 Continue\r\n\r\n" + _HEAD + _CHUNKED,  # an interim response first
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(b"".join(_EVENTS)), b"".join(_EVENTS)),
    ],
    ids=["chunked", "interim-1xx", "content-length"],
)
def test_body_is_the_same_at_every_split(wire: bytes) -> None:
    for reads in _splits(wire):
        p, sink = _parse(reads)
        assert sink.body == b"".join(_EVENTS), reads
        assert p.message_complete and p.status == 200
        assert not p.should_close()


def test_each_event_keeps_the_time_of_the_read_that_carried_it() -> None:
    reads = [_HEAD] + [b"%x\r\n%s\r\n" % (len(e), e) for e in _EVENTS] + [b"0\r\n\r\n"]
    p, sink = _parse(reads)
    assert sink.times == [1.0, 2.0, 3.0, 4.0]
    assert p.message_complete


def test_head_and_first_event_in_one_read_and_close_requested() -> None:
    head = _HEAD.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n")
    p, sink = _parse([head + _CHUNKED[:20], _CHUNKED[20:]])
    assert sink.body == b"".join(_EVENTS)
    assert p.message_complete and p.should_close()


def test_error_status_body_is_kept_not_streamed() -> None:
    body = b'{"error":{"message":"overloaded"}}'
    wire = b"HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        len(body),
        body,
    )
    for reads in _splits(wire):
        p, sink = _parse(reads)
        assert p.status == 503 and bytes(p.error_body) == body and sink.body == b""
        assert p.message_complete


def test_unfinished_body_is_not_complete_and_bad_framing_raises() -> None:
    p, _ = _parse([_HEAD + _CHUNKED[:-5]])
    assert not p.message_complete and p.should_close()
    with pytest.raises(ChunkedError):
        _parse([_HEAD + b"zz\r\n"])


def test_bytes_after_the_response_close_the_connection() -> None:
    p, _ = _parse([_HEAD + _CHUNKED + b"HTTP/1.1 200 OK\r\n"])
    assert p.message_complete and p.should_close()


def test_fast_path_and_long_path_record_the_same_stream() -> None:
    """Whole chunks of one `data:` event skip the decoder and the SSE parser; the record must not tell."""
    from loadgen.measure.records import RequestRecord
    from loadgen.protocol.accumulator import StreamAccumulator
    from loadgen.protocol.dialects import get_dialect

    events = [
        b'data: {"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n' % i
        for i in range(1, 5)
    ] + [b"data: [DONE]\n\n"]
    wire = _HEAD + b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    results = set()
    for reads in _splits(wire):
        rec = RequestRecord("r", "v", "m")
        acc = StreamAccumulator(rec, get_dialect("openai-chat"))
        p = _Parser(acc)
        for r in reads:
            p.now = 1.0 if len(r) < len(wire) // 2 else 2.0  # same stamp for the same cut, whatever the path
            p.parse(r)
        assert p.message_complete and acc.saw_done
        results.add((tuple(rec.chunk_tokens), rec.output_tokens, rec.error))
    assert results == {((1, 1, 1, 1), 4, None)}
