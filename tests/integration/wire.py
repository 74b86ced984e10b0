"""Raw HTTP/1.1 helpers for tests that read the simulator's bytes off a socket."""

from __future__ import annotations


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
