"""A lean streaming HTTP/1.1 connection on a gevent socket.

Why not Locust's FastHttpSession or httpx: FastHttp's `iter_lines()` reads in 1 KiB blocks, which adds to every TTFT
(the `fasthttp` client's "added TTFT" in `python bench/run.py --parts fidelity`); an httpx client per user blocked
the loop while users spawned. Here the process's reactor reads every response socket with the kernel's receive
stamp (reactor.py); TLS is decrypted from memory buffers so HTTPS streams are read the same way; geventhttpclient's
C llhttp parser takes the response head (_http_parser.py), but for a chunked 200 one read by _wire.c `parse_head`,
and loadgen de-chunks the body (chunked.py) straight into the SSE accumulator. One connection per user and variant,
kept alive across requests, so there is no pool to contend on.
"""

from __future__ import annotations

import socket
import ssl
import time
from typing import Any
from urllib.parse import urlsplit

from gevent import socket as gsocket

from loadgen.client._http_parser import HTTPParseError, LLHTTPResponse
from loadgen.client.consumer import BodyConsumer
from loadgen.client.dial import Dialer, TLSSession
from loadgen.client.reactor import Reactor, Reading, enable_rx_timestamps
from loadgen.measure.records import ErrorKind
from loadgen.protocol.chunked import ChunkedDecoder, ChunkedError
from loadgen.protocol.native import fast_path_available, wire

__all__ = ["BodyConsumer", "Endpoint", "StreamConnection", "TransportError"]

_RECV = 65536
_MAX_ERROR_BODY = 65536
# A response head (status line and header fields) longer than this is no HTTP server's answer to a completion
# request: the request fails as malformed instead of llhttp holding every field for as long as the server sends them
# (Go's http.Transport allows 10 MB, Node 16 KiB; real inference servers send well under 2 KiB).
_MAX_HEAD = 65536
# After a stream's end marker, how long to wait for the rest of the body (the chunked terminator) before giving
# the connection up: the request is complete and measured, only the connection's reuse is at stake.
_AFTER_END_S = 1.0
# _wire.c `parse_head`, or None (no C half, or LOADGEN_PURE_PYTHON=1 at import): then llhttp reads every head.
_PARSE_HEAD: Any = getattr(wire, "parse_head", None) if fast_path_available() else None


class TransportError(Exception):
    """A request failed below HTTP semantics; `error_class` is one of `ErrorKind`."""

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


class _Parser(LLHTTPResponse):
    """A response read as it arrives: llhttp parses the head; a chunked 200 body (every streaming server's) is
    de-chunked by `ChunkedDecoder` and handed to the consumer with its arrival time; any other body goes through
    llhttp (error bodies are kept, up to 64 KiB)."""

    def __init__(self, consumer: BodyConsumer) -> None:
        super().__init__()
        self.consumer = consumer
        self.now = 0.0
        self.error_body = bytearray()
        self._chunked: ChunkedDecoder | None = None
        self._head_tail = b""  # the last bytes of a head still incomplete, to find a CRLFCRLF split across reads
        self._head_bytes = 0  # of the response head, so far
        self.received_any = False
        # The consumer's C fast half (accumulator.py `make_chunk_counter`), given reads between events while armed.
        self.chunk_counter: Any = None
        self._body_unseen = False  # a chunked 200's head came alone: its body's first read is `count_first`'s
        self.reading: Reading | None = None  # set by the connection, to shorten its idle wait after the end

    @property
    def ended_by_consumer(self) -> bool:
        """The stream sent its end marker and nothing went wrong: whatever happens to the connection now (closed,
        reset, the chunked terminator never sent) takes nothing from the request."""
        consumer = self.consumer
        return self.status == 200 and consumer.finished and not consumer.fatal

    @property
    def ends_at_close(self) -> bool:
        """A body with neither chunked coding nor a length: HTTP/1.1 ends it by closing the connection."""
        return (
            self.headers_complete
            and self.status >= 200
            and self._chunked is None
            and "chunked" not in str(self.get("transfer-encoding", "")).lower()
            and self.get("content-length") is None
        )

    def on_read(self, t: float, data: bytes) -> bool:
        """One read that arrived at `t`; True once the response is complete or the consumer wants no more."""
        counter = self.chunk_counter
        if counter is not None:
            if counter.armed:  # since the reactor took this read (an earlier one waited to be parsed): unseen
                data = data[counter.try_count(t, data) :]
            elif self._body_unseen:  # the first read of a body whose head came alone
                self._body_unseen = False
                data = data[self.consumer.count_first(t, data) :]
            self.consumer.disarm_fast_path()
        self.now = t
        self.received_any = True
        self.parse(data)  # b"" (the counter took it all): the decoder and the SSE parser stand as they are
        done = self.message_complete or self.consumer.fatal
        if not done and self.consumer.finished and self.reading is not None:
            self.reading.read_timeout = min(self.reading.read_timeout, _AFTER_END_S)
        if counter is not None and not done:
            dec = self._chunked
            if dec is not None and dec.at_boundary:
                self.consumer.arm_fast_path()
        return done

    def parse(self, data: bytes) -> None:
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
                    self.drop_trailing_data()  # nothing may follow a response we did not ask for
            return
        if self.headers_complete and self.status >= 200:
            self.feed_llhttp(data)
            return
        if not self._head_bytes and _PARSE_HEAD is not None:
            # A chunked 200 head whole in the first read, every byte of it one llhttp reads the same: read in C
            # (tests/unit/test_head_parity.py); anything else, or a head over the bound, goes to llhttp below.
            head = _PARSE_HEAD(data)
            if head is not None and head[0] <= _MAX_HEAD:
                self._head_bytes = cut = head[0]
                self.take_head(*head[1:])
                self._after_head(data[cut:], True)
                return
        # The head: llhttp gets exactly its bytes, so the body after it can be de-chunked here.
        while data:
            seen = self._head_tail + data
            end = seen.find(b"\r\n\r\n")
            cut = len(data) if end < 0 else end + 4 - len(self._head_tail)
            self._head_bytes += cut
            if self._head_bytes > _MAX_HEAD:
                raise HTTPParseError(f"response head over {_MAX_HEAD >> 10} KiB ({self._head_bytes} bytes)")
            if end < 0:
                self._head_tail = seen[-3:]
                self.feed_llhttp(data)
                return
            self._head_tail = b""
            self.feed_llhttp(data[:cut])
            data = data[cut:]
            if not self.headers_complete:
                continue  # a CRLFCRLF inside something llhttp still reads as head (cannot happen in valid HTTP)
            if self.status < 200:
                continue  # an interim (1xx) response: the real head follows
            self._after_head(data, self.status == 200 and "chunked" in str(self.get("transfer-encoding", "")).lower())
            return

    def _after_head(self, data: bytes, chunked: bool) -> None:
        """The rest of the read after a final head; `chunked`: a chunked 200, whose body is de-chunked here."""
        if self.status == 200:
            self.consumer.on_head(str(self.get("content-type", "")))
        if chunked:
            self._chunked = ChunkedDecoder()
            if self.chunk_counter is not None:  # the body's first chunks to C, from here or the next read
                self._body_unseen = not data
                data = data[self.consumer.count_first(self.now, data) :]
            if data:
                self.parse(data)
        elif data:
            self.feed_llhttp(data)

    def on_body(self, buf: bytearray) -> None:
        if self.status == 200:
            consumer = self.consumer
            if not consumer.finished:
                consumer.feed(self.now, bytes(buf))
        elif len(self.error_body) < _MAX_ERROR_BODY:
            self.error_body += buf[: _MAX_ERROR_BODY - len(self.error_body)]


class StreamConnection:
    """Owned by one user for one endpoint; not shared between greenlets.

    `dialer` (name resolution, TLS contexts) and `reactor` (what reads the response) are shared with the other
    connections of the process when given (loadgen's runtime gives its own); without them the connection has its
    own: a dialer, and a reactor started at its first request and stopped when it closes."""

    __slots__ = (
        "_ep",
        "_dialer",
        "_reactor",
        "_own_reactor",
        "_connect_timeout",
        "_read_timeout",
        "_sock",
        "_tls",
        "_session",
        "_opened",
        "requests_on_conn",
        "last_rx",
        "location",
        "captured",
    )

    def __init__(
        self,
        endpoint: Endpoint,
        connect_timeout: float,
        read_timeout: float,
        tls_ca_file: str | None = None,
        tls_verify: bool = True,
        *,
        dialer: Dialer | None = None,
        reactor: Reactor | None = None,
    ) -> None:
        self._ep = endpoint
        self._dialer = Dialer() if dialer is None else dialer
        self._reactor = reactor
        self._own_reactor = reactor is None
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._sock: gsocket.socket | None = None
        # The context is built at the first connect, so a CA file that does not load fails requests, not the user.
        self._tls: tuple[str | None, bool] | None = (tls_ca_file, tls_verify) if endpoint.tls else None
        self._session: TLSSession | None = None  # the TLS state of the open connection
        # (connect s: name resolution when not cached, then TCP; TLS handshake s or None) of the last `_connect`.
        self._opened: tuple[float, float | None] = (0.0, None)
        self.requests_on_conn = 0
        # Of the last response: the arrival stamp of its last read (the kernel's, like every chunk time), and its
        # Location header when it was a redirect.
        self.last_rx = 0.0
        self.location: str | None = None
        # The last response's value of the header `post_stream` was asked to capture (None: absent, or not asked).
        self.captured: str | None = None

    def twin(self) -> StreamConnection:
        """A connection of its own to the same endpoint, the same settings, dialer and reactor (not yet open): an
        agent's sub-agent runs beside its parent, on a connection of its own as a real agent's does."""
        tls = self._tls or (None, True)
        return StreamConnection(
            self._ep,
            self._connect_timeout,
            self._read_timeout,
            tls[0],
            tls[1],
            dialer=self._dialer,
            reactor=None if self._own_reactor else self._reactor,
        )

    def close(self) -> None:
        self._session = None
        try:
            if self._sock is not None:
                try:
                    self._sock.close()
                finally:
                    self._sock = None
        finally:
            reactor = self._reactor
            if self._own_reactor and reactor is not None:
                self._reactor = None
                reactor.close()

    def _reader(self) -> Reactor:
        if self._reactor is None:
            self._reactor = Reactor()
        return self._reactor

    def _connect(self) -> gsocket.socket:
        ep = self._ep
        ctx: ssl.SSLContext | None = None
        if self._tls is not None:
            try:
                ctx = self._dialer.tls_context(*self._tls)
            except (OSError, ssl.SSLError) as e:
                raise TransportError(ErrorKind.CONNECT, f"cannot load tls_ca_file {self._tls[0]!r}: {e}") from e
        t0 = time.monotonic()
        try:
            sock = self._dialer.open_tcp(ep.host, ep.port, self._connect_timeout)
        except TimeoutError as e:
            raise TransportError(ErrorKind.CONNECT, f"connect timeout to {ep.host}:{ep.port}") from e
        except OSError as e:
            raise TransportError(ErrorKind.CONNECT, f"connect to {ep.host}:{ep.port}: {e}") from e
        t1 = time.monotonic()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        enable_rx_timestamps(sock)
        self._session = None
        tls_s: float | None = None
        if ctx is not None:
            sock.settimeout(self._connect_timeout)
            try:
                session = TLSSession(ctx, ep.host)
                session.handshake(sock)
                self._session = session
            except ssl.SSLCertVerificationError as e:
                sock.close()
                raise TransportError(
                    ErrorKind.CONNECT,
                    f"TLS certificate verification failed for {ep.host}: {e.verify_message}; trust a private CA "
                    "with the variant's tls_ca_file (tls_verify: false for testing only)",
                ) from e
            except (OSError, ssl.SSLError) as e:
                sock.close()
                raise TransportError(ErrorKind.CONNECT, f"TLS handshake with {ep.host}: {e}") from e
            tls_s = time.monotonic() - t1
        self._opened = (t1 - t0, tls_s)
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
        self, head: bytes, extra_head: bytes, body: bytes, consumer: BodyConsumer, capture: str | None = None
    ) -> tuple[float, int, bytes]:
        """Send the request and stream a 200 response body into `consumer` as it arrives.

        Returns (sent_time, status, error_body); error_body holds the first bytes of a non-200 response. Raises
        TransportError; whatever the consumer already got stays with it (partial streams keep their timings).
        `capture`: a response header whose value to keep in `captured` (a router's session token): llhttp parses
        every header of the head anyway, so this costs one lookup, made only when asked.
        """
        request = b"".join((head, extra_head, b"Content-Length: %d\r\n\r\n" % len(body), body))
        self.location = None
        self.captured = None
        for attempt in (0, 1):
            reused = self._sock is not None
            sock = self._sock if self._sock is not None else self._connect()
            self._sock = sock
            # Connect and TLS time are this request's when it opened the connection: not part of TTFT (which runs
            # from the write below), reported beside it.
            consumer.on_connection(*((None, None) if reused else self._opened))
            sent = time.monotonic()
            consumer.on_sent(sent)
            try:
                self._send(sock, request, reused and attempt == 0)
                status, error_body = self._read_response(sock, consumer, reused and attempt == 0, capture)
                return sent, status, error_body
            except _StaleConnection:
                # The server closed an idle keep-alive connection before our request: nothing was received, so a
                # fresh connection sends the same request, it does not retry a failed one.
                self.close()
                continue
            except BaseException:
                self.close()
                raise
        raise TransportError(ErrorKind.STREAM_INTERRUPTED, "connection closed before the response")

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
            raise TransportError(ErrorKind.TIMEOUT, f"sending the request took over {self._read_timeout:g}s") from e
        except ssl.SSLError as e:
            raise TransportError(ErrorKind.STREAM_INTERRUPTED, f"TLS error while sending: {e}") from e
        except (ConnectionResetError, BrokenPipeError) as e:
            if may_be_stale:
                raise _StaleConnection() from e
            raise TransportError(ErrorKind.STREAM_INTERRUPTED, f"connection lost while sending: {e}") from e
        except OSError as e:
            raise TransportError(ErrorKind.STREAM_INTERRUPTED, f"socket error while sending: {e}") from e

    def _read_response(
        self, sock: gsocket.socket, consumer: BodyConsumer, may_be_stale: bool, capture: str | None = None
    ) -> tuple[int, bytes]:
        parser = _Parser(consumer)
        self._read_in_reactor(sock._sock, parser, may_be_stale)
        if capture is not None:
            value = parser.get(capture)  # a header sent twice comes as a list: the last one counts
            self.captured = value[-1] if isinstance(value, list) else value
        if parser.message_complete:
            self.requests_on_conn += 1
            if parser.should_close():
                self.close()
        else:
            # A fatal chunk (malformed, error payload: the rest of the body is of no use), or a body that ended
            # with the connection (closed, reset, or no terminator after the end marker): not reusable.
            self.close()
        if 300 <= parser.status < 400:
            location = parser.get("location")
            self.location = None if location is None else str(location)
        return parser.status, bytes(parser.error_body)

    def _read_in_reactor(self, raw: socket.socket, parser: _Parser, may_be_stale: bool) -> None:
        """The connection's reactor reads the socket (see reactor.py); this greenlet waits for the end."""

        def on_eof() -> bool:
            if not parser.received_any and may_be_stale:
                raise _StaleConnection()
            if parser.ended_by_consumer or parser.ends_at_close:
                return True  # the consumer decides whether what came is whole (its end marker)
            what = "response body" if parser.headers_complete else "response headers"
            raise TransportError(ErrorKind.STREAM_INTERRUPTED, f"connection closed during {what}")

        def on_error(e: OSError) -> BaseException | None:
            if parser.ended_by_consumer:
                return None
            if isinstance(e, ConnectionResetError):
                if not parser.received_any and may_be_stale:
                    return _StaleConnection()
                return TransportError(ErrorKind.STREAM_INTERRUPTED, f"connection reset: {e}")
            return TransportError(ErrorKind.STREAM_INTERRUPTED, f"socket error: {e}")

        def on_idle() -> BaseException | None:
            if parser.ended_by_consumer:
                return None
            return TransportError(ErrorKind.TIMEOUT, f"no bytes for {self._read_timeout:g}s")

        on_data = parser.on_read
        session = self._session
        reactor = self._reader()
        if session is None and reactor.fast:
            # Plain TCP: the reactor's C drainer may take whole token chunks straight into the record.
            parser.chunk_counter = parser.consumer.make_chunk_counter()
        if session is not None:

            def on_data(t: float, data: bytes) -> bool:
                try:
                    plain, closed = session.open(data)
                except ssl.SSLError as e:
                    raise TransportError(ErrorKind.STREAM_INTERRUPTED, f"TLS error: {e}") from e
                done = parser.on_read(t, plain) if plain else False
                if closed and not done:
                    return on_eof()
                return done

        reading = Reading(raw, on_data, on_eof, on_error, on_idle, self._read_timeout, parser.chunk_counter)
        parser.reading = reading
        try:
            reactor.read(reading)
        except (HTTPParseError, ChunkedError) as e:
            raise TransportError(ErrorKind.MALFORMED, f"HTTP parse error: {e}") from e
        finally:
            self.last_rx = reading.last_arrival()
            # parser -> reading -> its callbacks -> parser is a reference cycle: left alone, every response would
            # be freed only by the cyclic GC, whose collections of them stall the loop for milliseconds.
            parser.reading = None


class _StaleConnection(Exception):
    pass
