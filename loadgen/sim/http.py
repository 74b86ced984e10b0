"""A lean HTTP/1.1 server on ``asyncio.Protocol``: just enough for an OpenAI-compatible streaming API.

Why not aiohttp/uvicorn: the simulator is the ground truth for chunk timing, so a chunk must leave in exactly one
``transport.write`` at a moment we timestamp, with no framework buffering between the engine step and the socket.

Supported: keep-alive, pipelined requests (answered in order, one at a time), request bodies framed by
Content-Length, responses with Content-Length or ``Transfer-Encoding: chunked``. Anything malformed gets a 400 and
the connection is closed, since the framing of whatever follows can no longer be trusted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

_log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 64 * 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
# Stop reading from a client that pipelines this much ahead of its responses.
_PIPELINE_HIGH_WATER = 1024 * 1024

_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    413: "Payload Too Large",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
    505: "HTTP Version Not Supported",
}


@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: str
    version: str
    #: Lower-cased names; repeated headers joined with ", ".
    headers: dict[str, str]
    body: bytes
    keep_alive: bool
    #: time.monotonic() when the whole request had been received and parsed.
    arrival: float


class Handler(Protocol):
    def __call__(self, request: Request, response: Response) -> None: ...


class _BadRequestError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Response:
    """Writes the response to one request. ``on_abort`` runs if the client disconnects before it completes."""

    __slots__ = ("_conn", "_chunked", "_started", "done", "keep_alive", "on_abort", "version", "written_at")

    def __init__(self, conn: HttpConnection, request: Request) -> None:
        self._conn = conn
        self._chunked = False
        self._started = False
        self.done = False
        self.keep_alive = request.keep_alive
        self.version = request.version
        self.on_abort: Callable[[], None] | None = None
        #: time.monotonic() right after the last write returned (its bytes left between the returned time and this).
        self.written_at = 0.0

    @property
    def started(self) -> bool:
        return self._started

    @property
    def connected(self) -> bool:
        return not self._conn.closed

    def _head(self, status: int, headers: list[tuple[str, str]]) -> bytearray:
        head = bytearray(f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}\r\n".encode("latin-1"))
        for name, value in headers:
            head += f"{name}: {value}\r\n".encode("latin-1")
        head += b"connection: keep-alive\r\n\r\n" if self.keep_alive else b"connection: close\r\n\r\n"
        return head

    def send(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        headers: list[tuple[str, str]] | None = None,
    ) -> float:
        """Send a complete response; returns the monotonic time taken just before the write."""
        if self._started:
            raise RuntimeError("response already started")
        self._started = True
        hdrs = [("content-type", content_type), ("content-length", str(len(body)))]
        if headers:
            hdrs.extend(headers)
        data = self._head(status, hdrs)
        data += body
        t = time.monotonic()
        self._conn.write(bytes(data))
        self.written_at = time.monotonic()
        self._finish()
        return t

    def start_stream(
        self,
        status: int,
        content_type: str,
        headers: list[tuple[str, str]] | None = None,
        first: bytes = b"",
    ) -> float:
        """Send the head (and ``first`` body bytes) of a streamed response in one write; returns the write time."""
        if self._started:
            raise RuntimeError("response already started")
        self._started = True
        # HTTP/1.0 has no chunked encoding: stream the raw body and delimit it by closing.
        self._chunked = self.version == "HTTP/1.1"
        if not self._chunked:
            self.keep_alive = False
        hdrs = [("content-type", content_type), ("cache-control", "no-cache")]
        if self._chunked:
            hdrs.append(("transfer-encoding", "chunked"))
        if headers:
            hdrs.extend(headers)
        data = self._head(status, hdrs)
        if first:
            data += self._frame(first)
        t = time.monotonic()
        self._conn.write(bytes(data))
        self.written_at = time.monotonic()
        return t

    def _frame(self, data: bytes) -> bytes:
        return b"%x\r\n%b\r\n" % (len(data), data) if self._chunked else data

    def write(self, data: bytes, end: bool = False) -> float:
        """Send body bytes of a stream in one write (``end`` appends the terminator); returns the write time."""
        if not self._started or self.done:
            raise RuntimeError("stream not started or already finished")
        out = self._frame(data) if data else b""
        if end and self._chunked:
            out += b"0\r\n\r\n"
        t = time.monotonic()
        if out:
            self._conn.write(out)
        self.written_at = time.monotonic()
        if end:
            self._finish()
        return t

    def reset(self) -> None:
        """Abort the connection with a TCP RST (fault injection); ``on_abort`` then runs as for a client hang-up."""
        self._conn.reset()

    def _finish(self) -> None:
        self.done = True
        self._conn.response_done(self)


class HttpConnection(asyncio.Protocol):
    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._current: Response | None = None
        self._processing = False
        self._paused = False
        self._continue_sent = False
        self.closed = False

    # ---- asyncio.Protocol ----
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            # asyncio already sets TCP_NODELAY on TCP transports; say so explicitly, since a Nagle-delayed chunk
            # would be a timing error in the ground truth.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._buf += data
        self._process()

    def eof_received(self) -> bool | None:
        # The client closed its side: the transport closes and connection_lost aborts the response in flight (its
        # `on_abort`), as uvicorn does for vLLM and SGLang, whose engines then abort the request. A client gone
        # mid-stream (a closed tab, `traffic.cancel`) is seen at once, not at the write after next that fails.
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        current, self._current = self._current, None
        if current is not None and not current.done and current.on_abort is not None:
            try:
                current.on_abort()
            except Exception:
                _log.exception("abort callback failed")

    # ---- plumbing used by Response ----
    def write(self, data: bytes) -> None:
        if not self.closed and self._transport is not None:
            self._transport.write(data)

    def response_done(self, response: Response) -> None:
        if response is not self._current:
            return
        self._current = None
        if not response.keep_alive:
            self._close()
            return
        if self._paused and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        if not self._processing:
            self._process()

    def reset(self) -> None:
        # SO_LINGER with a zero timeout makes close() send RST instead of FIN: the client sees ECONNRESET, not a
        # clean EOF. abort() (not close()) so a client that stopped reading cannot keep the connection alive; what
        # is still in the transport's buffer is dropped, which on loopback is nothing in practice.
        if self.closed or self._transport is None:
            return
        self.closed = True  # nothing more goes out; connection_lost still follows and runs on_abort
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self._transport.abort()

    def _close(self) -> None:
        if not self.closed and self._transport is not None:
            self.closed = True
            self._transport.close()  # flushes what is buffered first

    # ---- request handling ----
    def _process(self) -> None:
        self._processing = True
        try:
            while self._current is None and not self.closed:
                try:
                    request = self._parse_one()
                except _BadRequestError as e:
                    self._reject(e.status, str(e))
                    return
                if request is None:
                    break
                response = Response(self, request)
                self._current = response
                try:
                    self._handler(request, response)
                except Exception:
                    _log.exception("handler failed for %s %s", request.method, request.path)
                    if not response.started:
                        response.keep_alive = False
                        response.send(
                            500, b'{"error": {"message": "internal error", "type": "InternalError", "code": 500}}'
                        )
                    else:
                        self._close()
            busy = self._current is not None and not self._paused
            if busy and len(self._buf) > _PIPELINE_HIGH_WATER and self._transport is not None:
                self._paused = True
                self._transport.pause_reading()
        finally:
            self._processing = False

    def _reject(self, status: int, message: str) -> None:
        body = b'{"error": {"message": "%b", "type": "BadRequestError", "code": %d}}' % (
            message.replace('"', "'").encode("utf-8", "replace"),
            status,
        )
        head = (
            f"HTTP/1.1 {status} {_REASONS.get(status, 'Bad Request')}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.write(head.encode("latin-1") + body)
        self._buf.clear()
        self._close()

    def _parse_one(self) -> Request | None:
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEADER_BYTES:
                raise _BadRequestError(431, "request head too large")
            return None
        if end > MAX_HEADER_BYTES:
            raise _BadRequestError(431, "request head too large")
        lines = bytes(buf[:end]).decode("latin-1").split("\r\n")
        parts = lines[0].split(" ")
        if len(parts) != 3 or not parts[0].isalpha() or not parts[1]:
            raise _BadRequestError(400, "malformed request line")
        method, target, version = parts
        if version not in ("HTTP/1.1", "HTTP/1.0"):
            raise _BadRequestError(505 if version.startswith("HTTP/") else 400, "unsupported HTTP version")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip() or " " in name or "\t" in name:
                raise _BadRequestError(400, "malformed header line")
            key = name.lower()
            value = value.strip(" \t")
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        if "transfer-encoding" in headers:
            raise _BadRequestError(501, "chunked request bodies are not supported; send Content-Length")
        length = 0
        if "content-length" in headers:
            raw = headers["content-length"]
            if not raw.isdigit():
                raise _BadRequestError(400, "invalid Content-Length")
            length = int(raw)
            if length > MAX_BODY_BYTES:
                raise _BadRequestError(413, "request body too large")
        total = end + 4 + length
        if len(buf) < total:
            # curl asks before sending a large body and would otherwise stall a second waiting for this.
            if not self._continue_sent and headers.get("expect", "").lower() == "100-continue":
                self._continue_sent = True
                self.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return None
        self._continue_sent = False
        body = bytes(buf[end + 4 : total])
        del buf[:total]
        conn = headers.get("connection", "").lower()
        keep_alive = "close" not in conn if version == "HTTP/1.1" else "keep-alive" in conn
        path, _, query = target.partition("?")
        return Request(method.upper(), path, query, version, headers, body, keep_alive, time.monotonic())


async def serve_http(handler: Handler, host: str, port: int) -> asyncio.Server:
    """Listen on ``host:port`` (0 = ephemeral) and answer with ``handler``."""
    loop = asyncio.get_running_loop()
    return await loop.create_server(lambda: HttpConnection(handler), host, port, reuse_address=True)
