"""Misbehaving HTTP servers on loopback, for fault tests of whole runs: each writes exactly the bytes under test.

`RawServer` answers every request of every connection with one `Answer` (a GET — the scraper asking for /metrics —
gets a 404). `RefusingProxy` forwards to a real server and can refuse connections for a while: its listening socket
closed (a SYN gets RST: ECONNREFUSED) and every open connection reset, as when a server restarts, then it listens
on the same port again.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable

import orjson

_SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
_END = b"0\r\n\r\n"

# Writes one response to a request; False when the connection is to be closed after it.
Answer = Callable[[socket.socket], bool]


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def token_event(text: str, n: int) -> bytes:
    obj = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
        "usage": {"prompt_tokens": 5, "completion_tokens": n, "total_tokens": 5 + n},
    }
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def short_stream(tokens: int = 4) -> bytes:
    """A whole well-formed stream body (chunked): `tokens` token chunks, a finish, [DONE], the terminator."""
    body = b"".join(chunk(token_event(" tok", i + 1)) for i in range(tokens))
    final = {
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens},
    }
    return body + chunk(b"data: " + orjson.dumps(final) + b"\n\n") + chunk(b"data: [DONE]\n\n") + _END


def _read_request(conn: socket.socket) -> bytes | None:
    """One whole request off `conn` (head and Content-Length body): its request line, or None if it closed."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        data = conn.recv(65536)
        if not data:
            return None
        body += data
    return head.split(b"\r\n", 1)[0]


class RawServer:
    """Answers each POST with `answer`; counts connections and requests."""

    def __init__(self, answer: Answer) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.answer = answer
        self.requests = 0
        self.connections = 0
        self._lock = threading.Lock()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                while True:
                    line = _read_request(conn)
                    if line is None:
                        return
                    if line.startswith(b"GET"):
                        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                        continue
                    with self._lock:
                        self.requests += 1
                    if not self.answer(conn):
                        return
            except OSError:
                return

    def close(self) -> None:
        self._stop = True
        _abort(self.listener)


def huge_line(size: int, sent: list[int], tokens: int = 1, gap: float = 0.0) -> Answer:
    """A stream whose last event is one line of `size` bytes: `tokens` token chunks (`gap` s apart), then
    `data: aaaa…` in 64 KiB HTTP chunks, then its end. Appends to `sent` how many of the line's bytes went out
    before the client closed."""
    piece = b"a" * 65536

    def answer(conn: socket.socket) -> bool:
        conn.sendall(_SSE_HEAD + b"\r\n")
        for i in range(tokens):
            time.sleep(gap)
            conn.sendall(chunk(token_event(" tok", i + 1)))
        time.sleep(gap)
        conn.sendall(chunk(b"data: "))
        out = 0
        try:
            while out < size:
                conn.sendall(chunk(piece))
                out += len(piece)
            conn.sendall(chunk(b"\n\n") + short_stream(1))
        except OSError:
            sent.append(out)
            return False
        sent.append(out)
        return True

    return answer


def many_headers(count: int, value_len: int) -> Answer:
    """A well-formed short stream after a head of `count` extra header fields, each `value_len` bytes of value."""
    fill = b"v" * value_len
    head = _SSE_HEAD + b"".join(b"X-Filler-%04d: %s\r\n" % (i, fill) for i in range(count)) + b"\r\n"

    def answer(conn: socket.socket) -> bool:
        conn.sendall(head + short_stream())
        return True

    return answer


class RefusingProxy:
    """Forwards every connection to 127.0.0.1:`target`; `refuse(seconds)` makes it refuse connections that long."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self.refused_between: tuple[float, float] | None = None
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def refuse(self, seconds: float) -> None:
        """Closed for `seconds` (open connections reset), then listening on the same port again."""
        start = time.monotonic()
        _abort(self.listener)
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            _abort(s)
        time.sleep(seconds)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(128)
        self.listener = listener
        self.refused_between = (start, time.monotonic())
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def close(self) -> None:
        _abort(self.listener)


def _abort(s: socket.socket) -> None:
    """Reset (SO_LINGER 0) and close `s`, waking a thread blocked on it (shutdown first: close alone does not)."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()
