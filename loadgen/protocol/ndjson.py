"""Incremental newline-delimited JSON framing (Ollama's native streams), with the SSE parser's interface.

A line is bounded like an SSE event (`MAX_EVENT`): beyond it `feed` raises `EventTooLarge`. Each read is searched for
line ends in its own bytes only, so a long line costs its length once, not once per read.
"""

from __future__ import annotations

from loadgen.protocol.sse import MAX_EVENT, EventTooLarge, SSEEvent

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
        held = len(buf)  # held bytes hold no line end: only the new ones are searched
        buf += data
        end = buf.rfind(b"\n", held)
        if end < 0:
            if len(buf) > MAX_EVENT:
                self._overflow(len(buf), bytes(buf[:2048]))
            return []
        lines = bytes(buf[:end]).split(b"\n")
        del buf[: end + 1]
        for line in lines:
            if len(line) > MAX_EVENT:
                self._overflow(len(line), line[:2048])
        if len(buf) > MAX_EVENT:
            self._overflow(len(buf), bytes(buf[:2048]))
        return [SSEEvent(line.rstrip(b"\r")) for line in lines if line.strip()]

    def _overflow(self, size: int, head: bytes) -> None:
        self._buf.clear()
        raise EventTooLarge(size, head, "NDJSON line")

    def close(self) -> tuple[list[SSEEvent], bytes]:
        """A last line without its newline is still a whole JSON object if it parses; the caller decides."""
        leftover = bytes(self._buf).strip()
        self._buf.clear()
        return [], leftover
