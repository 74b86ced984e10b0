"""Opening a connection to a variant: name resolution and TLS contexts kept by a `Dialer`, TCP, and TLS over
memory buffers.

Kept apart from the request/response code (connection.py): what runs once per connection, not per request.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
import time
from typing import Any

from gevent import socket as gsocket
from gevent import ssl as gssl

__all__ = ["Dialer", "TLSSession"]

_RECV = 65536

# Resolved addresses are reused for this long. gevent resolves names on a thread pool, a thread hand-off per
# connect: a thousand users connecting at spawn held the event loop up, each waiting for its own answer.
_DNS_TTL_S = 30.0
_DNS_ENTRIES = 256
_TLS_CONTEXTS = 16

_Address = tuple[int, int, int, Any]


class Dialer:
    """How the connections of one process open: resolved addresses (for `_DNS_TTL_S`) and one client TLS context
    per trust setting, shared by every connection given this dialer. Owned by whoever owns those connections' life
    (loadgen's per-process `Runtime`); a connection given none makes its own."""

    __slots__ = ("_addresses", "_contexts")

    def __init__(self) -> None:
        self._addresses: dict[tuple[str, int], tuple[float, list[_Address]]] = {}
        self._contexts: dict[tuple[str | None, bool], ssl.SSLContext] = {}

    def tls_context(self, ca_file: str | None, verify: bool) -> ssl.SSLContext:
        """The client TLS context of one trust setting: loading a CA store (the system one above all) is CPU work
        not to be done per user on the event loop. `ca_file` replaces the system store (like curl's `--cacert`);
        `verify=False` checks neither the certificate nor the host name. Load errors are raised, not kept."""
        key = (ca_file, verify)
        ctx = self._contexts.get(key)
        if ctx is None:
            ctx = gssl.create_default_context(cafile=ca_file)
            if not verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            if len(self._contexts) >= _TLS_CONTEXTS:
                self._contexts.clear()
            self._contexts[key] = ctx
        return ctx

    def open_tcp(self, host: str, port: int, timeout: float) -> gsocket.socket:
        """`create_connection` with cached name resolution: each address in turn, the last error if none answers."""
        err: OSError | None = None
        for family, type_, proto, addr in self._resolve(host, port):
            sock = gsocket.socket(family, type_, proto)
            sock.settimeout(timeout)
            try:
                sock.connect(addr)
                return sock
            except OSError as e:
                sock.close()
                err = e
        raise err if err is not None else OSError(f"no address for {host}")

    def _resolve(self, host: str, port: int) -> list[_Address]:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            pass
        else:  # an IP literal needs no resolver at all
            return [(socket.AF_INET6 if ip.version == 6 else socket.AF_INET, socket.SOCK_STREAM, 0, (host, port))]
        now = time.monotonic()
        hit = self._addresses.get((host, port))
        if hit is not None and hit[0] > now:
            return hit[1]
        infos = [(f, t, p, addr) for f, t, p, _, addr in gsocket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)]
        if len(self._addresses) >= _DNS_ENTRIES:
            self._addresses.clear()
        self._addresses[(host, port)] = (now + _DNS_TTL_S, infos)
        return infos


class TLSSession:
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
