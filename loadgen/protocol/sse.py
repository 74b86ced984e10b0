"""Incremental Server-Sent Events parser.

Bytes arrive in arbitrary pieces: an event may be split across reads, a read may hold many events, and line ends may
be LF, CRLF or CR (a CRLF can itself be split between two reads). The parser yields the `data` payload of each
complete event as bytes, untouched, so the caller decides how to decode it (orjson on the hot path).

Fast path: servers send one `data:` line per event and LF line ends, so a whole event is one `find(b"\\n\\n")` away.

One event is bounded (`MAX_EVENT`, 1 MiB): a server that never sends the blank line would otherwise grow the buffer
for as long as the request may last. Beyond it `feed` raises `EventTooLarge` (the stream is `malformed`). Each read
is searched for the blank line from where the previous search stopped, so a long event costs its length once, not
once per read.
"""

from __future__ import annotations

__all__ = ["MAX_EVENT", "EventTooLarge", "SSEEvent", "SSEParser"]

# The longest event (its bytes before the blank line that ends it), or NDJSON line, a stream may send: far above
# any token chunk (a few hundred bytes; a final chunk with logprobs, some KiB), far below what hurts a worker.
MAX_EVENT = 1 << 20


class EventTooLarge(ValueError):
    """An SSE event (or NDJSON line) longer than `MAX_EVENT`: the stream is malformed; `head` holds its first bytes."""

    def __init__(self, size: int, head: bytes, what: str = "SSE event") -> None:
        super().__init__(
            f"an {what} of over {MAX_EVENT >> 20} MiB without its end ({size} bytes so far): not a token stream"
        )
        self.size = size
        self.head = head


class SSEEvent:
    """One dispatched event. `event` is None for the default "message" type."""

    __slots__ = ("data", "event")

    def __init__(self, data: bytes, event: str | None = None) -> None:
        self.data = data
        self.event = event

    def __repr__(self) -> str:
        return f"SSEEvent(data={self.data!r}, event={self.event!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SSEEvent) and (self.data, self.event) == (other.data, other.event)


class SSEParser:
    """Feed bytes, get complete events; `close()` tells whether the stream ended mid-event."""

    __slots__ = ("_buf", "_pending_cr", "_scanned", "bytes_received", "comments")

    def __init__(self) -> None:
        self._buf = bytearray()
        # The previous read ended in CR: a LF starting the next read belongs to it.
        self._pending_cr = False
        # How far into `_buf` the blank line has been searched for already (the last byte of it excepted: it may be
        # the first LF of a pair).
        self._scanned = 0
        self.bytes_received = 0
        self.comments = 0

    @property
    def idle(self) -> bool:
        """No part of an event is held: the next byte starts a new one."""
        return not self._buf and not self._pending_cr

    def feed(self, data: bytes) -> list[SSEEvent]:
        self.bytes_received += len(data)
        if (
            not self._buf
            and not self._pending_cr
            and data[-2:] == b"\n\n"
            and len(data) <= MAX_EVENT
            and b"\r" not in data
        ):
            # The common read: whole events, LF line ends, nothing buffered. No copy into the buffer.
            if data[:6] == b"data: " and data.find(b"\n") == len(data) - 2:
                return [SSEEvent(data[6:-2])]
            whole: list[SSEEvent] = []
            for block in data[:-2].split(b"\n\n"):
                ev = self._parse_block(block)
                if ev is not None:
                    whole.append(ev)
            return whole
        if self._pending_cr:
            self._pending_cr = False
            if data[:1] == b"\n":
                data = data[1:]
        if b"\r" in data:
            # A trailing CR already ends its line; if the next read starts with LF, that LF is the CRLF's second half.
            self._pending_cr = data.endswith(b"\r")
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf
        buf += data
        events: list[SSEEvent] = []
        start = 0
        scan = max(self._scanned - 1, 0)
        while True:
            end = buf.find(b"\n\n", scan)
            if end < 0:
                break
            if end - start > MAX_EVENT:
                self._overflow(end - start)
            block = bytes(buf[start:end])
            start = scan = end + 2
            ev = self._parse_block(block)
            if ev is not None:
                events.append(ev)
        if start:
            del buf[:start]
        if len(buf) > MAX_EVENT:
            self._overflow(len(buf))
        self._scanned = len(buf)
        return events

    def _overflow(self, size: int) -> None:
        head = bytes(self._buf[:2048])
        self._buf.clear()
        self._scanned = 0
        raise EventTooLarge(size, head)

    def close(self) -> tuple[list[SSEEvent], bytes]:
        """End of stream. Returns events completed by EOF-as-line-end, and any bytes of an unfinished event.

        Per the SSE spec an event without its blank line is discarded; we hand back its bytes so the caller can
        classify a truncated stream and keep the partial payload for the error record.
        """
        self._pending_cr = False
        leftover = bytes(self._buf).strip(b"\n")
        self._buf.clear()
        self._scanned = 0
        return [], leftover

    def _parse_block(self, block: bytes) -> SSEEvent | None:
        if block.startswith(b"data: ") and b"\n" not in block:
            return SSEEvent(block[6:])
        data_lines: list[bytes] = []
        event: str | None = None
        for line in block.split(b"\n"):
            if not line:
                continue
            if line[0:1] == b":":
                self.comments += 1
                continue
            name, sep, value = line.partition(b":")
            if sep and value[0:1] == b" ":
                value = value[1:]
            if name == b"data":
                data_lines.append(value)
            elif name == b"event":
                event = value.decode("utf-8", "replace")
            # `id` and `retry` only matter for reconnection, which a benchmark must not do.
        if not data_lines:
            return None
        return SSEEvent(b"\n".join(data_lines), event)
