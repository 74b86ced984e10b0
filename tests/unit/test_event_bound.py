"""One SSE event (or NDJSON line) is bounded at `MAX_EVENT` (1 MiB): a server that never ends its event fails the
stream as `malformed` at the bound instead of growing the buffer for as long as the request may last, and a long
event is searched for its end once, not once per read."""

from __future__ import annotations

import pytest

from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect
from loadgen.protocol.ndjson import NDJSONParser
from loadgen.protocol.sse import MAX_EVENT, EventTooLarge, SSEEvent, SSEParser

_PIECE = 16384


class _Spy(bytearray):
    """A buffer that counts the bytes its searches for an event's end look at."""

    looked = 0

    def find(self, sub: bytes, start: int = 0, *rest: int) -> int:  # type: ignore[override]
        end = super().find(sub, start, *rest)
        _Spy.looked += (len(self) if end < 0 else end + len(sub)) - start
        return end

    def rfind(self, sub: bytes, start: int = 0, *rest: int) -> int:  # type: ignore[override]
        _Spy.looked += len(self) - start
        return super().rfind(sub, start, *rest)


@pytest.mark.parametrize("parser_type", [SSEParser, NDJSONParser])
def test_an_event_that_never_ends_fails_at_the_bound_and_the_buffer_is_dropped(parser_type: type) -> None:
    p = parser_type()
    head = b"data: " if parser_type is SSEParser else b""
    fed = p.feed(head + b'{"x": "' + b"a" * (_PIECE - 20))
    assert fed == []
    with pytest.raises(EventTooLarge) as e:
        while True:
            p.feed(b"a" * _PIECE)
    assert MAX_EVENT < e.value.size <= MAX_EVENT + _PIECE
    assert e.value.head.startswith(head + b'{"x": "aaa') and len(e.value.head) == 2048
    assert "over 1 MiB" in str(e.value)
    assert len(p._buf) == 0  # nothing held after the failure


@pytest.mark.parametrize("parser_type", [SSEParser, NDJSONParser])
def test_an_event_just_under_the_bound_is_whole_and_one_over_it_in_a_single_read_is_refused(
    parser_type: type,
) -> None:
    end = b"\n\n" if parser_type is SSEParser else b"\n"
    head = b"data: " if parser_type is SSEParser else b""
    body = b"b" * (MAX_EVENT - len(head))
    events = parser_type().feed(head + body + end)
    assert events == [SSEEvent(body)]
    with pytest.raises(EventTooLarge):
        parser_type().feed(head + body + b"b" + end + head + b"next" + end)


@pytest.mark.parametrize("parser_type", [SSEParser, NDJSONParser])
def test_a_long_event_is_searched_once_not_once_per_read(parser_type: type) -> None:
    p = parser_type()
    p._buf = _Spy()
    _Spy.looked = 0
    head = b"data: " if parser_type is SSEParser else b""
    fed = len(head)
    p.feed(head)
    while fed < MAX_EVENT - 2 * _PIECE:
        assert p.feed(b"c" * _PIECE) == []
        fed += _PIECE
    end = b"\n\n" if parser_type is SSEParser else b"\n"
    (event,) = p.feed(b"c" + end)
    assert len(event.data) == fed + 1 - len(head)
    # Each byte looked at about once (a rescan of the whole buffer per read would look at ~fed²/2/_PIECE ≈ 32 MiB).
    assert _Spy.looked <= fed + 4 * len(end) * (fed // _PIECE + 2)


@pytest.mark.parametrize(("dialect", "event"), [("openai-chat", b"data: "), ("ollama-chat", b"")])
def test_the_stream_fails_as_malformed_keeping_its_tokens_and_first_bytes(dialect: str, event: bytes) -> None:
    d = get_dialect(dialect)
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, d)
    acc.on_sent(1.0)
    if dialect == "openai-chat":
        acc.feed(1.1, b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n')
    else:
        acc.feed(1.1, b'{"model":"m","message":{"role":"assistant","content":"hi"},"done":false}\n')
    acc.feed(1.2, event + b'{"choices": "' + b"z" * _PIECE)
    t = 1.3
    while not acc.fatal:
        acc.feed(t, b"z" * _PIECE)
        t += 0.01
    assert t < 1.3 + 0.01 * (MAX_EVENT // _PIECE + 2)
    rec = acc.finish(t)
    assert rec.error == ErrorKind.MALFORMED and "over 1 MiB" in rec.error_detail
    assert list(rec.chunk_tokens) == [1] and rec.chunk_times[0] == 1.1
    assert rec.partial_bytes.startswith(event + b'{"choices": "zzz')
