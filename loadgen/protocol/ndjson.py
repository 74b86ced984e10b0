"""Incremental newline-delimited JSON framing (Ollama's native streams), with the SSE parser's interface."""

from __future__ import annotations

from loadgen.protocol.sse import SSEEvent

__all__ = ["NDJSONParser"]


class NDJSONParser:
    """Feed bytes, get one event per complete non-empty line; `close()` hands back an unfinished line."""

    __slots__ = ("_buf", "bytes_received", "comments")

    def __init__(self) -> None:
        self._buf = bytearray()
        self.bytes_received = 0
        self.comments = 0

    def feed(self, data: bytes) -> list[SSEEvent]:
        self.bytes_received += len(data)
        buf = self._buf
        buf += data
        end = buf.rfind(b"\n")
        if end < 0:
            return []
        lines = bytes(buf[:end]).split(b"\n")
        del buf[: end + 1]
        return [SSEEvent(line.rstrip(b"\r")) for line in lines if line.strip()]

    def close(self) -> tuple[list[SSEEvent], bytes]:
        """A last line without its newline is still a whole JSON object if it parses; the caller decides."""
        leftover = bytes(self._buf).strip()
        self._buf.clear()
        return [], leftover
