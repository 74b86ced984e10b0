"""Raw HTTP/1.1 helpers for tests that read the simulator's bytes off a socket."""

from __future__ import annotations

import socket


def dechunk(raw: bytes) -> tuple[bytes, bool]:
    """The body carried by the complete chunks of ``raw``, and whether the zero-length terminator arrived."""
    body, pos = b"", 0
    while True:
        eol = raw.find(b"\r\n", pos)
        if eol < 0:
            return body, False
        size = int(raw[pos:eol], 16)
        if size == 0:
            return body, raw[eol + 2 : eol + 4] == b"\r\n"
        if len(raw) < eol + 2 + size + 2:
            return body, False
        body += raw[eol + 2 : eol + 2 + size]
        pos = eol + 2 + size + 2


def read_request(conn: socket.socket) -> bool:
    """Read one whole HTTP request (head and Content-Length body) off ``conn``; False if the client closed first."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data:
            return False
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += conn.recv(65536)
    return True
