"""The 1 MiB event bound on both read paths, against a raw server on loopback: a stream whose token chunks are
followed by an event that never ends fails as `malformed` at the bound, keeps the tokens it got, and its connection
is closed (the next request opens a new one), with the C half on (it counts the token chunks: it holds nothing
across reads, so an unfinished event always reaches the Python parser, where the bound is) and with
LOADGEN_PURE_PYTHON=1; the two records are equal."""

from __future__ import annotations

import socket
import time

import pytest

from loadgen.client.connection import Endpoint, StreamConnection, TransportError
from loadgen.client.reactor import Reactor
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect
from loadgen.protocol.native import fast_path_available

from .misbehaving import RawServer, huge_line, short_stream

_SSE_OK = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _request(conn: StreamConnection) -> RequestRecord:
    d = get_dialect("openai-chat")
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, d)
    head = conn.head_bytes(d.path_for("m"), {"Content-Type": "application/json"})
    try:
        _, status, _ = conn.post_stream(head, b"", b"{}", acc)
    except TransportError as e:
        return acc.fail(time.monotonic(), e.error_class, e.detail)
    rec.status = status
    return acc.finish(conn.last_rx)


def _both_requests(pure_python: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[RequestRecord], int, int]:
    """An unbounded event, then a normal stream, on one StreamConnection: (records, connections, reads in C)."""
    if pure_python:
        monkeypatch.setenv("LOADGEN_PURE_PYTHON", "1")
    else:
        monkeypatch.delenv("LOADGEN_PURE_PYTHON", raising=False)
    sent: list[int] = []
    # 64 MiB: more than loopback's socket buffers could take (≈ 10 MiB), so a client that stops reading at the
    # bound leaves the server unable to write it all.
    huge = huge_line(64 << 20, sent, tokens=5, gap=0.02)
    calls = [0]

    def answer(conn: socket.socket) -> bool:
        calls[0] += 1
        if calls[0] == 1:
            return huge(conn)
        conn.sendall(_SSE_OK + short_stream())
        return True

    server = RawServer(answer)
    reactor = Reactor()
    conn = StreamConnection(Endpoint(server.base_url), 2.0, 10.0, reactor=reactor)
    try:
        records = [_request(conn), _request(conn)]
        in_c = reactor.pop_reads_in_c()
    finally:
        conn.close()
        reactor.close()
        server.close()
    assert sent and sent[0] < 64 << 20, "the client read the whole 64 MiB line instead of closing at the bound"
    return records, server.connections, in_c


def test_an_event_over_the_bound_is_malformed_on_both_paths_and_closes_the_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if not fast_path_available():
        pytest.skip("the C half (loadgen/protocol/_wire.c) is not built here: no C path to compare")
    fast, fast_conns, fast_in_c = _both_requests(False, monkeypatch)
    pure, pure_conns, pure_in_c = _both_requests(True, monkeypatch)
    assert fast_in_c > 0 and pure_in_c == 0  # the C half counted token chunks of the first stream
    for first, second in (fast, pure):
        assert first.error == ErrorKind.MALFORMED and "over 1 MiB" in first.error_detail, first.error_detail
        assert list(first.chunk_tokens) == [1] * 5 and first.output_tokens == 5
        assert first.partial_bytes.startswith(b"data: aaaa")
        assert second.error is None and list(second.chunk_tokens) == [1] * 4
    assert fast_conns == pure_conns == 2, "the connection of the malformed stream was reused"

    def fields(r: RequestRecord) -> tuple[object, ...]:
        return (r.error, r.error_detail, list(r.chunk_tokens), r.output_tokens, r.prompt_tokens, r.token_source)

    assert [fields(r) for r in fast] == [fields(r) for r in pure]
