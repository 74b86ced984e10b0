"""The response head read in C (_wire.c `parse_head`) against llhttp: on every head either path takes (captured
heads, names in every casing and order, duplicates, Connection and Content-Length beside chunked, odd whitespace,
reason phrases, 1xx before the final head, error statuses, garbage, a head cut at every byte), the parser is left in
the same state (status, headers as `get()` and `items()` give them, keep-alive and `should_close()`, the chunked or
llhttp branch, the error body) and the request's record is the same, with the C head reader on and off. The C
reader takes only a chunked `HTTP/1.1 200` head whole in the first read; the tests also say which heads it took, so
that a reader that took nothing would not pass."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.client import connection
from loadgen.client.connection import _MAX_HEAD, _Parser
from loadgen.measure.records import RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator, fast_path_available
from loadgen.protocol.dialects import get_dialect

from .test_wire import _CLOSING, _ROLE, _chunk, _record_state, _vllm

pytestmark = pytest.mark.skipif(
    not fast_path_available() or connection._PARSE_HEAD is None, reason="the C half is not built"
)

_FIXTURES = Path(__file__).parent.parent / "fixtures" / "vllm"
_STREAMS = Path(__file__).parent / "streams"

_BODY = _chunk(_ROLE) + _chunk(_vllm(1)) + _chunk(_vllm(2)) + b"".join(_CLOSING)
_TYPICAL = (
    b"HTTP/1.1 200 OK\r\ndate: Mon, 07 Dec 2026 06:00:00 GMT\r\nserver: uvicorn\r\n"
    b"content-type: text/event-stream; charset=utf-8\r\ntransfer-encoding: chunked\r\n\r\n"
)
_NAMES = ("session-token", "x-session", "location", "content-type", "x-a", "connection", "keep-alive")


def _parser_state(p: _Parser) -> tuple[object, ...]:
    names = {k.lower() for k, _ in p.items()} | {k.upper() for k, _ in p.items()} | set(_NAMES)
    return (
        p.status,
        p.status_message,
        p.headers_complete,
        p.message_begun,
        p.message_complete,
        list(p.items()),
        sorted((k, repr(p.get(k))) for k in names),
        p.get_code(),
        p.get_http_version(),
        p.should_keep_alive(),
        p.should_close(),
        p.parser_failed(),
        p.ends_at_close,
        p._chunked is not None,
        p._header_position,
        p._header_state,
        p._head_bytes,
        bytes(p.error_body),
        p._trailing_data_dropped,
    )


def _run(reads: list[bytes], c_head: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[object, ...]:
    """Feed `reads` (read i at t = i) as the reactor does, with the C counter armed as it arms it; the parser's
    state, the record, and the error raised (if any), with the C head reader on or off."""
    from loadgen.protocol import _wire

    monkeypatch.setattr(connection, "_PARSE_HEAD", _wire.parse_head if c_head else None)
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, get_dialect("openai-chat"))
    parser = _Parser(acc)
    counter = acc.make_chunk_counter()
    parser.chunk_counter = counter
    error: object = None
    try:
        for i, data in enumerate(reads):
            if counter.armed:
                used = counter.try_count(float(i), data)
                if used == len(data):
                    continue
                data = data[used:]
            if parser.on_read(float(i), data):
                break
    except Exception as e:  # noqa: BLE001 - compared between the two paths
        error = (type(e).__name__, str(e))
    if parser.message_complete:
        acc.finish(float(len(reads)))
    else:
        acc.fail(float(len(reads)), "stream_interrupted", "cut")
    return _parser_state(parser), _record_state(rec), error, parser._keep_alive is not None


def _same(reads: list[bytes], monkeypatch: pytest.MonkeyPatch) -> bool:
    """Both paths alike; whether C read the head."""
    *slow, took_slow = _run(reads, False, monkeypatch)
    *fast, took = _run(reads, True, monkeypatch)
    assert not took_slow
    assert fast == slow, reads
    return bool(took)


def _head(status: bytes = b"200 OK", *lines: bytes) -> bytes:
    return b"HTTP/1.1 " + status + b"\r\n" + b"".join(line + b"\r\n" for line in lines) + b"\r\n"


def _chunked(*lines: bytes) -> bytes:
    return _head(b"200 OK", *lines, b"Transfer-Encoding: chunked")


# (head, whether C takes it)
_HEADS: list[tuple[bytes, bool]] = [
    (_TYPICAL, True),
    (_chunked(), True),
    (_head(b"200 OK", b"transfer-encoding: chunked", b"content-type: text/event-stream"), True),
    (_head(b"200 OK", b"TRANSFER-ENCODING: CHUNKED", b"CONTENT-TYPE: text/event-stream"), True),
    (_head(b"200 OK", b"Transfer-Encoding: Chunked", b"Content-Type: application/json"), True),
    # Reason phrases.
    (_head(b"200 ", b"Transfer-Encoding: chunked"), True),
    (_head(b"200", b"Transfer-Encoding: chunked"), True),
    (_head(b"200 Okay then", b"Transfer-Encoding: chunked"), True),
    (_head(b"200 OK ", b"Transfer-Encoding: chunked"), True),
    (_head(b"200 \xe9K", b"Transfer-Encoding: chunked"), True),
    (_head(b"200  OK", b"Transfer-Encoding: chunked"), False),
    (_head(b"200 O\tK", b"Transfer-Encoding: chunked"), False),
    (_head(b"200 O\x01K", b"Transfer-Encoding: chunked"), False),
    (_head(b"2000 OK", b"Transfer-Encoding: chunked"), False),
    (_head(b"200OK", b"Transfer-Encoding: chunked"), False),
    # Duplicates: joined as geventhttpclient joins them; a session token sent twice.
    (_chunked(b"X-A: 1", b"x-a: 2", b"X-a: 3"), True),
    (_chunked(b"Content-Type: text/event-stream", b"content-type: text/plain"), True),
    (_chunked(b"session-token: s1", b"Session-Token: s2"), True),
    (_chunked(b"Set-Cookie: a=1", b"X-B: 2", b"set-cookie: b=2"), True),
    (_head(b"200 OK", b"Transfer-Encoding: chunked", b"Transfer-Encoding: chunked"), False),
    # Connection and keep-alive.
    (_chunked(b"Connection: close"), True),
    (_chunked(b"connection: CLOSE"), True),
    (_chunked(b"Connection: keep-alive"), True),
    (_chunked(b"Connection: Keep-Alive", b"Keep-Alive: timeout=5, max=100"), True),
    (_chunked(b"Connection: keep-alive", b"Connection: close"), True),
    (_chunked(b"Connection: keep-alive, close"), False),
    (_chunked(b"Connection: closed"), False),
    (_chunked(b"Connection: upgrade", b"Upgrade: websocket"), False),
    (_chunked(b"Upgrade: h2c"), False),
    (_chunked(b"Proxy-Connection: close"), False),
    (_chunked(b"Connection: close "), False),
    # Content-Length.
    (_chunked(b"Content-Length: 5"), False),
    (_head(b"200 OK", b"Content-Length: 0"), False),
    (_head(b"200 OK", b"Content-Type: text/event-stream"), False),  # ends with the connection
    # Transfer codings.
    (_head(b"200 OK", b"Transfer-Encoding: gzip, chunked"), False),
    (_head(b"200 OK", b"Transfer-Encoding: chunked, gzip"), False),
    (_head(b"200 OK", b"Transfer-Encoding: chunked "), False),
    (_head(b"200 OK", b"Transfer-Encoding: identity"), False),
    # Odd whitespace and bytes.
    (_chunked(b"X:1", b"Y:  2", b"Z:\t3", b"W: \t 4 \t"), True),
    (_chunked(b"X:", b"Y: ", b"Z:\t"), True),
    (_chunked(b"X: a  b", b"Y: \xe9\xff"), True),
    (_head(b"200 OK", b"Transfer-Encoding:chunked"), True),
    (_head(b"200 OK", b"Transfer-Encoding: \tchunked"), True),
    (_chunked(b"X : 1"), False),
    (_chunked(b"X\t: 1"), False),
    (_chunked(b" X: 1"), False),
    (_chunked(b"X: a", b" folded"), False),  # obs-fold
    (_chunked(b"X: a\x01b"), False),
    (_chunked(b"X: a\x7fb"), False),
    (_chunked(b"X\x01: 1"), False),
    (_chunked(b"X(: 1"), False),
    (_chunked(b": 1"), False),
    (_chunked(b"X 1"), False),
    (_chunked(b"!#$%&'*+-.^_`|~09az: tokens"), True),
    (b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\r\n\r\n", False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\n\r\n", False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\n", False),
    (b"HTTP/1.1 200 OK\r\nX: a\rb\r\nTransfer-Encoding: chunked\r\n\r\n", False),
    # Versions.
    (b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", False),
    (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n", False),
    (b"HTTP/2.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", False),
    (b"http/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", False),
    (b"\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", False),
    # 1xx before the final head.
    (b"HTTP/1.1 100 Continue\r\n\r\n" + _TYPICAL, False),
    (b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\n" + _TYPICAL, False),
    (b"HTTP/1.1 100 Continue\r\nTransfer-Encoding: chunked\r\n\r\n", False),
    # Other statuses.
    (_head(b"201 Created", b"Transfer-Encoding: chunked"), False),
    (_head(b"204 No Content"), False),
    (_head(b"301 Moved", b"Location: /v2/chat", b"Content-Length: 0"), False),
    (_head(b"400 Bad Request", b"Content-Type: application/json", b"Transfer-Encoding: chunked"), False),
    (_head(b"429 Too Many Requests", b"Retry-After: 1", b"Content-Length: 2"), False),
    (_head(b"500 Internal Server Error", b"Content-Length: 2", b"Connection: close"), False),
    (_head(b"503 Service Unavailable"), False),
    # Garbage.
    (b"garbage\r\n\r\n", False),
    (b"HTTP/1.1 200 OK\r\n", False),
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n", False),
    (b"\x00" * 40 + b"\r\n\r\n", False),
]


def _body_for(head: bytes) -> bytes:
    low = head.lower()
    if b"content-length: 2" in low:
        return b"{}"
    if b"content-length: 5" in low:
        return b"hello"
    if b"content-length: 0" in low or b"204 no content" in low:
        return b""
    if b"chunked" in low:
        return _BODY
    return _chunk(_vllm(1))  # read until the connection closes


@pytest.mark.parametrize(("head", "taken"), _HEADS, ids=[repr(h[:60]) for h, _ in _HEADS])
def test_every_head_leaves_the_parser_as_llhttp_does(head: bytes, taken: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    body = _body_for(head)
    # The head with the body in one read, the head alone, the head and each chunk alone.
    assert _same([head + body], monkeypatch) is taken
    assert _same([head, body], monkeypatch) is taken
    assert _same([head, *_pieces(body)], monkeypatch) is taken
    assert _same([head + body[:7], body[7:]], monkeypatch) is taken
    # Bytes after the response that nobody asked for.
    _same([head + body + b"HTTP/1.1 200 OK\r\n"], monkeypatch)


def _pieces(body: bytes) -> Iterator[bytes]:
    for i in range(0, len(body), 40):
        yield body[i : i + 40]


@pytest.mark.parametrize(("head", "taken"), [h for h in _HEADS if h[1]][:12])
def test_a_head_cut_anywhere_is_llhttps_and_the_same(head: bytes, taken: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    wire = head + _BODY
    for k in range(1, len(head) + 8):
        # Cut inside the head: llhttp reads it (C takes only a head whole in the first read); after it: C.
        assert _same([wire[:k], wire[k:]], monkeypatch) is (k >= len(head))
    for k in range(1, len(head) - 1, 5):
        assert not _same([wire[:k], wire[k : k + 3], wire[k + 3 :]], monkeypatch)


def test_header_orders_and_casings(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = [b"Content-Type: text/event-stream", b"Transfer-Encoding: chunked", b"Connection: close", b"X-A: 1"]
    for order in itertools.permutations(lines):
        for case in (bytes.lower, bytes.upper, bytes.title):
            head = _head(b"200 OK", *(case(line.split(b":")[0]) + b":" + line.split(b":")[1] for line in order))
            assert _same([head + _BODY], monkeypatch)


@pytest.mark.parametrize("path", sorted(_FIXTURES.glob("*.http")), ids=lambda p: p.name)
def test_captured_vllm_responses(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wire = path.read_bytes()
    end = wire.find(b"\r\n\r\n") + 4
    assert _same([wire], monkeypatch)
    assert _same([wire[:end], wire[end:]], monkeypatch)
    for k in range(1, end, 3):
        assert not _same([wire[:k], wire[k:]], monkeypatch)


@pytest.mark.parametrize("path", sorted(_STREAMS.glob("openai-chat*.txt")), ids=lambda p: p.name)
def test_captured_streams_under_the_captured_heads(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    events = [e + b"\n\n" for e in path.read_bytes().split(b"\n\n") if e.strip()]
    body = b"".join(_chunk(e[len(b"data: ") : -2]) if e.startswith(b"data: ") else b"" for e in events)
    body += b"0\r\n\r\n"
    heads = {(_FIXTURES / "completions.http").read_bytes().split(b"\r\n\r\n")[0] + b"\r\n\r\n", _TYPICAL}
    for head in sorted(heads):
        assert _same([head + body], monkeypatch)
        assert _same([head, body], monkeypatch)


def test_a_head_over_the_bound_fails_on_both_paths(monkeypatch: pytest.MonkeyPatch) -> None:
    big = _chunked(*(b"X-%d: %s" % (i, b"v" * 100) for i in range(_MAX_HEAD // 100)))
    assert len(big) > _MAX_HEAD
    assert not _same([big + _BODY], monkeypatch)
    fitting = _chunked(*(b"X-%d: %s" % (i, b"v" * 100) for i in range(500)))
    assert _same([fitting + _BODY], monkeypatch)


_NAME = st.sampled_from(
    [b"Content-Type", b"transfer-encoding", b"Transfer-Encoding", b"connection", b"Connection", b"X-A", b"x-a"]
    + [b"Content-Length", b"Upgrade", b"Keep-Alive", b"session-token", b"X y", b"", b"X\x80"]
)
_VALUE = st.sampled_from(
    [b"chunked", b"Chunked", b"close", b"keep-alive", b"text/event-stream", b"", b" ", b"\t1", b"2 ", b"\xe9"]
    + [b"gzip, chunked", b"0", b"a\x00", b"a\nb", b"x" * 30]
)
_LINE = st.tuples(_NAME, st.sampled_from([b":", b": ", b":\t", b" :"]), _VALUE).map(b"".join)
_STATUS = st.sampled_from([b"200 OK", b"200", b"200 ", b"204 No Content", b"100 Continue", b"404 Not Found"])


@settings(max_examples=400, deadline=None)
@given(status=_STATUS, lines=st.lists(_LINE, max_size=6), cut=st.integers(0, 400))
def test_generated_heads(status: bytes, lines: list[bytes], cut: int) -> None:
    head = _head(status, *lines)
    wire = head + _body_for(head)
    with pytest.MonkeyPatch.context() as mp:
        _same([wire], mp)
        if 0 < cut < len(wire):
            _same([wire[:cut], wire[cut:]], mp)
