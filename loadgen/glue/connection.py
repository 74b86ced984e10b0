"""A lean streaming HTTP/1.1 connection on a gevent socket.

Why not Locust's FastHttpSession or httpx: measured here, FastHttp's `iter_lines()` reads in 1 KiB blocks and added
~40 ms to every TTFT; an httpx client per user blocked the loop while users spawned. Here the process's reactor
reads every response socket with the kernel's receive stamp (reactor.py); TLS is decrypted from memory buffers so
HTTPS streams are read the same way; geventhttpclient's C llhttp parser takes the response head and loadgen
de-chunks the body (chunked.py) straight into the SSE accumulator. One connection per user and variant, kept alive
across requests, so there is no pool to contend on.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import ssl
import time
from typing import Any, Protocol
from urllib.parse import urlsplit

from gevent import socket as gsocket
from gevent import ssl as gssl
from geventhttpclient._parser import HTTPResponseParser
from geventhttpclient.response import HTTPParseError, HTTPResponse

from ..chunked import ChunkedDecoder, ChunkedError
from ..records import ErrorClass
from .reactor import Reading, enable_rx_timestamps, reactor

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

    def on_event(self, t: float, payload: bytes) -> None: ...

    sse_idle: bool

    @property
    def fatal(self) -> bool: ...

    # The C fast half's hand-over (stream.py): a tape or None, and the state moving between it and Python.
    def make_tape(self) -> Any: ...

    def take_back(self) -> None: ...

    def hand_over(self) -> None: ...


class _Parser(HTTPResponse):
    """A response read as it arrives: llhttp parses the head; a chunked 200 body (every streaming server's) is
    de-chunked by `ChunkedDecoder` and handed to the consumer with its arrival time; any other body goes through
    llhttp (error bodies are kept, up to 64 KiB)."""

    def __init__(self, consumer: BodyConsumer) -> None:
        super().__init__(method="POST")
        self.consumer = consumer
        self.now = 0.0
        self.status = 0
        self.error_body = bytearray()
        self._chunked: ChunkedDecoder | None = None
        self._head_tail = b""  # the last bytes of a head still incomplete, to find a CRLFCRLF split across reads
        self.received_any = False
        # The consumer's C fast half (stream.py `make_tape`), handed the reads between events while armed.
        self.tape: Any = None

    def take_at(self, t: float, data: bytes) -> bool:
        """One read that arrived at `t`; True once the response is complete or the consumer wants no more."""
        tape = self.tape
        if tape is not None:
            self.consumer.take_back()
        self.now = t
        self.received_any = True
        self.take(data)
        done = self.message_complete or self.consumer.fatal
        if tape is not None and not done:
            dec = self._chunked
            if dec is not None and dec.at_boundary:
                self.consumer.hand_over()
        return done

    def take(self, data: bytes) -> None:
        """Parse one read (stamped `self.now`). Raises HTTPParseError or ChunkedError on a malformed response."""
        dec = self._chunked
        if dec is not None:
            consumer = self.consumer
            if consumer.sse_idle:
                payloads, data = dec.lone_events(data)
                for payload in payloads:
                    if consumer.finished:
                        break
                    consumer.on_event(self.now, payload)
                if not data:
                    return
            for piece in dec.feed(data):
                if not consumer.finished:
                    consumer.feed(self.now, piece)
            if dec.complete:
                self.message_complete = True
                if dec.extra:
                    self._trailing_data_dropped = True  # nothing may follow a response we did not ask for
            return
        if self.headers_complete and self.status >= 200:
            HTTPResponseParser.feed(self, data)
            return
        # The head: llhttp gets exactly its bytes, so the body after it can be de-chunked here.
        while data:
            seen = self._head_tail + data
            end = seen.find(b"\r\n\r\n")
            if end < 0:
                self._head_tail = seen[-3:]
                HTTPResponseParser.feed(self, data)
                return
            cut = end + 4 - len(self._head_tail)
            self._head_tail = b""
            HTTPResponseParser.feed(self, data[:cut])
            data = data[cut:]
            if not self.headers_complete:
                continue  # a CRLFCRLF inside something llhttp still reads as head (cannot happen in valid HTTP)
            if self.status < 200:
                continue  # an interim (1xx) response: the real head follows
            if self.status == 200 and "chunked" in str(self.get("transfer-encoding", "")).lower():
                self._chunked = ChunkedDecoder()
                if data:
                    self.take(data)
            elif data:
                HTTPResponseParser.feed(self, data)
            return

    def _on_headers_complete(self) -> int | bool | None:
        result = super()._on_headers_complete()
        self.status = self.get_code()
        return result

    def _on_body(self, buf: bytearray) -> None:
        if self.status == 200:
            consumer = self.consumer
            if not consumer.finished:
                consumer.feed(self.now, bytes(buf))
        elif len(self.error_body) < _MAX_ERROR_BODY:
            self.error_body += buf[: _MAX_ERROR_BODY - len(self.error_body)]


@functools.lru_cache(maxsize=16)
def tls_context(ca_file: str | None, verify: bool) -> ssl.SSLContext:
    """The client TLS context of one trust setting, shared by every connection of the process: loading a CA store
    takes milliseconds, not to be spent per user on the event loop. `ca_file` replaces the system store (like curl's
    `--cacert`); `verify=False` checks neither the certificate nor the host name. Load errors are not cached."""
    ctx = gssl.create_default_context(cafile=ca_file)
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


# Resolved addresses per (host, port), for this long. gevent resolves names on a thread pool: ~0.25 ms and a thread
# hand-off per connect, and a thousand users connecting at spawn held the event loop up for tens of ms.
_DNS_TTL_S = 30.0
_dns_cache: dict[tuple[str, int], tuple[float, list[tuple[int, int, int, Any]]]] = {}


def _addresses(host: str, port: int) -> list[tuple[int, int, int, Any]]:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        pass
    else:  # an IP literal needs no resolver at all
        return [(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_STREAM, 0, (host, port))]
    now = time.monotonic()
    hit = _dns_cache.get((host, port))
    if hit is not None and hit[0] > now:
        return hit[1]
    infos = [(f, t, p, addr) for f, t, p, _, addr in gsocket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)]
    if len(_dns_cache) > 256:
        _dns_cache.clear()
    _dns_cache[(host, port)] = (now + _DNS_TTL_S, infos)
    return infos


def _open_tcp(host: str, port: int, timeout: float) -> gsocket.socket:
    """`create_connection` with cached name resolution: each address in turn, the last error if none answers."""
    err: OSError | None = None
    for family, type_, proto, addr in _addresses(host, port):
        sock = gsocket.socket(family, type_, proto)
        sock.settimeout(timeout)
        try:
            sock.connect(addr)
            return sock
        except OSError as e:
            sock.close()
            err = e
    raise err if err is not None else OSError(f"no address for {host}")


class _TLS:
    """TLS over memory buffers on a plain socket, so a TLS stream is read by the reactor like any other: `recvmsg`
    with the kernel's receive stamp, then decrypted here. (An SSL socket reads the file descriptor itself, which
    would take the read — and its timestamp — away from the reactor.)"""

    __slots__ = ("obj", "_in", "_out")

    def __init__(self, ctx: ssl.SSLContext, host: str) -> None:
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = ctx.wrap_bio(self._in, self._out, server_hostname=host)

    def handshake(self, sock: gsocket.socket) -> None:
        """On the connecting greenlet, with the socket's timeout. Raises ssl.SSLError / OSError."""
        while True:
            try:
                self.obj.do_handshake()
            except ssl.SSLWantReadError:
                self.flush(sock)
                data = sock.recv(_RECV)
                if not data:
                    raise ConnectionResetError("connection closed during the TLS handshake") from None
                self._in.write(data)
            else:
                self.flush(sock)
                return

    def flush(self, sock: gsocket.socket) -> None:
        if self._out.pending:
            sock.sendall(self._out.read())

    def seal(self, data: bytes) -> bytes:
        self.obj.write(data)
        return self._out.read()

    def open(self, data: bytes) -> tuple[bytes, bool]:
        """Decrypt what came off the wire: (plaintext so far, whether the peer closed TLS with close_notify)."""
        self._in.write(data)
        out: list[bytes] = []
        closed = False
        while True:
            try:
                piece = self.obj.read(_RECV)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                closed = True
                break
            if not piece:
                closed = True
                break
            out.append(piece)
        return b"".join(out), closed


class StreamConnection:
    """Owned by one user for one endpoint; not shared between greenlets."""

    __slots__ = ("_ep", "_connect_timeout", "_read_timeout", "_sock", "_tls", "_session", "requests_on_conn")

    def __init__(
        self,
        endpoint: Endpoint,
        connect_timeout: float,
        read_timeout: float,
        tls_ca_file: str | None = None,
        tls_verify: bool = True,
    ) -> None:
        self._ep = endpoint
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._sock: gsocket.socket | None = None
        # The context is built at the first connect, so a CA file that does not load fails requests, not the user.
        self._tls: tuple[str | None, bool] | None = (tls_ca_file, tls_verify) if endpoint.tls else None
        self._session: _TLS | None = None  # the TLS state of the open connection
        self.requests_on_conn = 0

    def close(self) -> None:
        self._session = None
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None

    def _connect(self) -> gsocket.socket:
        ep = self._ep
        ctx: ssl.SSLContext | None = None
        if self._tls is not None:
            try:
                ctx = tls_context(*self._tls)
            except (OSError, ssl.SSLError) as e:
                raise TransportError(ErrorClass.CONNECT, f"cannot load tls_ca_file {self._tls[0]!r}: {e}") from e
        try:
            sock = _open_tcp(ep.host, ep.port, self._connect_timeout)
        except TimeoutError as e:
            raise TransportError(ErrorClass.CONNECT, f"connect timeout to {ep.host}:{ep.port}") from e
        except OSError as e:
            raise TransportError(ErrorClass.CONNECT, f"connect to {ep.host}:{ep.port}: {e}") from e
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        enable_rx_timestamps(sock)
        self._session = None
        if ctx is not None:
            sock.settimeout(self._connect_timeout)
            try:
                session = _TLS(ctx, ep.host)
                session.handshake(sock)
                self._session = session
            except ssl.SSLCertVerificationError as e:
                sock.close()
                raise TransportError(
                    ErrorClass.CONNECT,
                    f"TLS certificate verification failed for {ep.host}: {e.verify_message}; trust a private CA "
                    "with the variant's tls_ca_file (tls_verify: false for testing only)",
                ) from e
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
                self._send(sock, request, reused and attempt == 0)
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

    def _send(self, sock: gsocket.socket, request: bytes, may_be_stale: bool) -> None:
        """The whole request. Plain TCP: one non-blocking `send()` on the raw socket, which takes a request of a
        few KiB whole (gevent's sendall first asks the kernel for the send-buffer size: a syscall per request);
        gevent's sendall, which waits for room, only for what is left."""
        try:
            if self._session is not None:
                request = self._session.seal(request)
            raw = getattr(sock, "_sock", None)
            if raw is not None:
                try:
                    n = raw.send(request)
                except (BlockingIOError, InterruptedError):
                    n = 0
                if n < len(request):
                    sock.sendall(memoryview(request)[n:])
            else:
                sock.sendall(request)
        except TimeoutError as e:
            raise TransportError(ErrorClass.TIMEOUT, f"sending the request took over {self._read_timeout:g}s") from e
        except ssl.SSLError as e:
            raise TransportError(ErrorClass.STREAM_INTERRUPTED, f"TLS error while sending: {e}") from e
        except (ConnectionResetError, BrokenPipeError) as e:
            if may_be_stale:
                raise _StaleConnection() from e
            raise TransportError(ErrorClass.STREAM_INTERRUPTED, f"connection lost while sending: {e}") from e
        except OSError as e:
            raise TransportError(ErrorClass.STREAM_INTERRUPTED, f"socket error while sending: {e}") from e

    def _read_response(self, sock: gsocket.socket, consumer: BodyConsumer, may_be_stale: bool) -> tuple[int, bytes]:
        parser = _Parser(consumer)
        self._read_in_reactor(sock._sock, parser, may_be_stale)
        if parser.message_complete:
            self.requests_on_conn += 1
            if parser.should_close():
                self.close()
        elif consumer.fatal:
            # A fatal chunk (malformed, error payload): the rest of the body is of no use.
            self.close()
        return parser.status, bytes(parser.error_body)

    def _read_in_reactor(self, raw: socket.socket, parser: _Parser, may_be_stale: bool) -> None:
        """This process's reactor reads the socket (see reactor.py); this greenlet waits for the end."""

        def on_eof() -> bool:
            if not parser.received_any and may_be_stale:
                raise _StaleConnection()
            what = "response body" if parser.headers_complete else "response headers"
            raise TransportError(ErrorClass.STREAM_INTERRUPTED, f"connection closed during {what}")

        def on_error(e: OSError) -> BaseException:
            if isinstance(e, ConnectionResetError):
                if not parser.received_any and may_be_stale:
                    return _StaleConnection()
                return TransportError(ErrorClass.STREAM_INTERRUPTED, f"connection reset: {e}")
            return TransportError(ErrorClass.STREAM_INTERRUPTED, f"socket error: {e}")

        def on_idle() -> BaseException:
            return TransportError(ErrorClass.TIMEOUT, f"no bytes for {self._read_timeout:g}s")

        on_data = parser.take_at
        session = self._session
        if session is None and reactor().fast:
            # Plain TCP: the reactor's C drainer may take whole token chunks straight into the record.
            parser.tape = parser.consumer.make_tape()
        if session is not None:

            def on_data(t: float, data: bytes) -> bool:
                try:
                    plain, closed = session.open(data)
                except ssl.SSLError as e:
                    raise TransportError(ErrorClass.STREAM_INTERRUPTED, f"TLS error: {e}") from e
                done = parser.take_at(t, plain) if plain else False
                if closed and not done:
                    return on_eof()
                return done

        try:
            reactor().read(Reading(raw, on_data, on_eof, on_error, on_idle, self._read_timeout, parser.tape))
        except (HTTPParseError, ChunkedError) as e:
            raise TransportError(ErrorClass.MALFORMED, f"HTTP parse error: {e}") from e


class _StaleConnection(Exception):
    pass
