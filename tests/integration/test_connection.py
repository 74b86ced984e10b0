"""The streaming connection against a hand-driven server thread: keep-alive reuse, a server that closed or reset
an idle keep-alive connection (the request goes again on a fresh one, once), and a connection lost mid-request
(classified, not retried), a connection that owns its reactor closed by the greenlet its last response woke."""

from __future__ import annotations

import socket
import struct
import threading
import time

import gevent
import pytest
from gevent import get_hub

from loadgen.client import reactor as reactor_module
from loadgen.client.connection import Endpoint, StreamConnection, TransportError
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect

from .misbehaving import RawServer
from .wire import read_request

_EVENT = b'data: {"choices":[{"delta":{"content":"hi"}}],"usage":{"completion_tokens":1}}\n\n'
_RESPONSE = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    + b"%x\r\n%s\r\n" % (len(_EVENT), _EVENT)
    + b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
)


class _Server:
    """Serves each accepted connection with `plan(index)`: how many requests to answer before ending it, and how
    ('close' = FIN, 'reset' = RST, 'cut' = RST right after reading the next request)."""

    def __init__(self, plan: list[tuple[int, str]]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.plan = plan
        self.accepted = 0
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for answers, how in self.plan:
            conn, _ = self.listener.accept()
            self.accepted += 1
            with conn:
                for _ in range(answers):
                    if not read_request(conn):
                        break
                    conn.sendall(_RESPONSE)
                if how == "cut":
                    read_request(conn)
                if how in ("reset", "cut"):
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))

    def close(self) -> None:
        self._thread.join(timeout=5)
        self.listener.close()


def _request(conn: StreamConnection) -> RequestRecord:
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, get_dialect("openai-chat"))
    head = conn.head_bytes("/v1/chat/completions", {"Content-Type": "application/json"})
    _, status, _ = conn.post_stream(head, b"", b"{}", acc)
    assert status == 200
    acc.finish(0.0)
    return rec


@pytest.mark.parametrize("how", ["close", "reset"])
def test_a_request_on_a_connection_the_server_dropped_goes_again_on_a_fresh_one(how: str) -> None:
    server = _Server([(1, how), (2, "close")])
    conn = StreamConnection(Endpoint(f"http://127.0.0.1:{server.port}"), 2.0, 2.0)
    try:
        first = _request(conn)
        time.sleep(0.05)  # the server has dropped the idle connection by now
        second = _request(conn)
        third = _request(conn)  # kept alive on the fresh connection
    finally:
        conn.close()
        server.close()
    assert [r.error for r in (first, second, third)] == [None, None, None]
    assert [r.output_tokens for r in (first, second, third)] == [1, 1, 1]
    assert server.accepted == 2


def test_a_connection_lost_after_the_request_was_read_is_an_error_not_a_retry() -> None:
    server = _Server([(0, "cut")])
    conn = StreamConnection(Endpoint(f"http://127.0.0.1:{server.port}"), 2.0, 2.0)
    try:
        with pytest.raises(TransportError) as err:
            _request(conn)
    finally:
        conn.close()
        server.close()
    assert err.value.error_class == ErrorKind.STREAM_INTERRUPTED
    assert server.accepted == 1


def test_a_connection_closing_its_own_reactor_after_its_last_response_leaves_the_hub_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reactor wakes the greenlet from its read callback; that greenlet closes the connection and with it the
    reactor the connection made for itself. The callback, resumed later, must not read the closed epoll set (it did:
    "I/O operation on closed epoll object" printed by the hub once per request)."""

    def answer(conn: socket.socket) -> bool:
        conn.sendall(_RESPONSE)
        return True

    server = RawServer(answer)
    errors: list[BaseException | None] = []
    monkeypatch.setattr(get_hub(), "handle_error", lambda context, kind, value, tb: errors.append(value))
    try:
        for _ in range(3):
            conn = StreamConnection(Endpoint(server.base_url), 2.0, 10.0)  # no reactor given: it owns one
            assert _request(conn).error is None
            conn.close()
            # Longer than the callback's re-poll period before the hub runs again: the callback polls on resuming.
            time.sleep(reactor_module._REPOLL_S * 2)
            gevent.sleep(0)
    finally:
        server.close()
    assert errors == []
