"""A lean streaming HTTP/1.1 connection on a gevent socket.

Why not Locust's FastHttpSession or httpx: measured here, FastHttp's `iter_lines()` reads in 1 KiB blocks and added
~40 ms to every TTFT; an httpx client per user blocked the loop while users spawned. This reader takes each
`recv()` the moment it returns, stamps it with the monotonic clock, and passes the body bytes (de-chunked by
geventhttpclient's C llhttp parser) straight to the SSE accumulator. One connection per user and variant, kept alive
across requests, so there is no pool to contend on.
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import Protocol
from urllib.parse import urlsplit

from gevent import socket as gsocket
from gevent import ssl as gssl
from geventhttpclient.response import HTTPParseError, HTTPResponse

from ..records import ErrorClass

__all__ = ["BodyConsumer", "Endpoint", "StreamConnection", "TransportError"]

_RECV = 65536
_MAX_ERROR_BODY = 65536


class TransportError(Exception):
    """A request failed below HTTP semantics; `error_class` is one of `ErrorClass`."""

    def __init__(self, error_class: str, detail: str) -> None:
        super().__init__(detail)
        self.error_class = error_class
        self.detail = detail


class Endpoint:
    """Where a variant lives, parsed once from its base URL."""

    __slots__ = ("host", "port", "tls", "prefix", "host_header")

    def __init__(self, base_url: str) -> None:
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base_url must be http(s)://host[:port][/prefix], got {base_url!r}")
        self.tls = u.scheme == "https"
        self.host = u.hostname
        self.port = u.port or (443 if self.tls else 80)
        self.prefix = u.path.rstrip("/")
        default_port = 443 if self.tls else 80
        self.host_header = self.host if self.port == default_port else f"{self.host}:{self.port}"


class BodyConsumer(Protocol):
    """What the connection streams a 200 body into (a `StreamAccumulator`)."""

    finished: bool

    def on_sent(self, t: float) -> None: ...

    def feed(self, t: float, data: bytes) -> None: ...

    @property
    def fatal(self) -> bool: ...


class _Parser(HTTPResponse):
    """llhttp response parser that routes body bytes as they are de-chunked, with their arrival time."""

    def __init__(self, consumer: BodyConsumer) -> None:
        super().__init__(method="POST")
        self.consumer = consumer
        self.now = 0.0
        self.status = 0
        self.error_body = bytearray()

    def _on_headers_complete(self) -> int | bool | None:
        result = super()._on_headers_complete()
        self.status = self.get_code()
        return result

    def _on_body(self, buf: bytearray) -> None:
        if self.status == 200:
            if not self.consumer.finished:
                self.consumer.feed(self.now, bytes(buf))
        elif len(self.error_body) < _MAX_ERROR_BODY:
            self.error_body += buf[: _MAX_ERROR_BODY - len(self.error_body)]


class StreamConnection:
    """Owned by one user for one endpoint; not shared between greenlets."""

    __slots__ = ("_ep", "_connect_timeout", "_read_timeout", "_sock", "_ssl_ctx", "requests_on_conn")

    def __init__(self, endpoint: Endpoint, connect_timeout: float, read_timeout: float) -> None:
        self._ep = endpoint
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._sock: gsocket.socket | None = None
        self._ssl_ctx: ssl.SSLContext | None = gssl.create_default_context() if endpoint.tls else None
        self.requests_on_conn = 0

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _connect(self) -> gsocket.socket:
        ep = self._ep
        try:
            sock = gsocket.create_connection((ep.host, ep.port), timeout=self._connect_timeout)
        except TimeoutError as e:
            raise TransportError(ErrorClass.CONNECT, f"connect timeout to {ep.host}:{ep.port}") from e
        except OSError as e:
            raise TransportError(ErrorClass.CONNECT, f"connect to {ep.host}:{ep.port}: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ssl_ctx is not None:
            try:
                sock = self._ssl_ctx.wrap_socket(sock, server_hostname=ep.host)
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise TransportError(ErrorClass.CONNECT, f"TLS handshake with {ep.host}: {e}") from e
        sock.settimeout(self._read_timeout)
        self.requests_on_conn = 0
        return sock

    def head_bytes(self, path: str, headers: dict[str, str]) -> bytes:
        """Request line + headers without Content-Length, built once per (user, variant)."""
        ep = self._ep
        lines = [f"POST {ep.prefix}{path} HTTP/1.1", f"Host: {ep.host_header}"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n").encode("latin-1")

    def post_stream(
        self, head: bytes, extra_head: bytes, body: bytes, consumer: BodyConsumer
    ) -> tuple[float, int, bytes]:
        """Send the request and stream a 200 response body into `consumer` as it arrives.

        Returns (sent_time, status, error_body); error_body holds the first bytes of a non-200 response. Raises
        TransportError; whatever the consumer already got stays with it (partial streams keep their timings).
        """
        request = b"".join((head, extra_head, b"Content-Length: %d\r\n\r\n" % len(body), body))
        for attempt in (0, 1):
            reused = self._sock is not None
            sock = self._sock if self._sock is not None else self._connect()
            self._sock = sock
            sent = time.monotonic()
            consumer.on_sent(sent)
            try:
                sock.sendall(request)
                status, error_body = self._read_response(sock, consumer, reused and attempt == 0)
                return sent, status, error_body
            except _StaleConnection:
                # The server closed an idle keep-alive connection before our request: nothing was received, so a
                # fresh connection sends the same request, it does not retry a failed one.
                self.close()
                continue
            except BaseException:
                self.close()
                raise
        raise TransportError(ErrorClass.STREAM_INTERRUPTED, "connection closed before the response")

    def _read_response(self, sock: gsocket.socket, consumer: BodyConsumer, may_be_stale: bool) -> tuple[int, bytes]:
        parser = _Parser(consumer)
        received_any = False
        try:
            while not parser.message_complete:
                data = sock.recv(_RECV)
                parser.now = time.monotonic()
                if not data:
                    if not received_any and may_be_stale:
                        raise _StaleConnection()
                    what = "response body" if parser.headers_complete else "response headers"
                    raise TransportError(ErrorClass.STREAM_INTERRUPTED, f"connection closed during {what}")
                received_any = True
                parser.feed(data)
                if consumer.fatal and not parser.message_complete:
                    # A fatal chunk (malformed, error payload): the rest of the body is of no use.
                    self.close()
                    break
        except TimeoutError as e:
            raise TransportError(ErrorClass.TIMEOUT, f"no bytes for {self._read_timeout:g}s") from e
        except HTTPParseError as e:
            raise TransportError(ErrorClass.MALFORMED, f"HTTP parse error: {e}") from e
        except ConnectionResetError as e:
            if not received_any and may_be_stale:
                raise _StaleConnection() from e
            raise TransportError(ErrorClass.STREAM_INTERRUPTED, f"connection reset: {e}") from e
        except OSError as e:
            raise TransportError(ErrorClass.STREAM_INTERRUPTED, f"socket error: {e}") from e
        if parser.message_complete:
            self.requests_on_conn += 1
            if parser.should_close():
                self.close()
        return parser.status, bytes(parser.error_body)


class _StaleConnection(Exception):
    pass
