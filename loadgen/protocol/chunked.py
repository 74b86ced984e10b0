"""Incremental decoder of HTTP/1.1 chunked transfer coding (RFC 9112 §7.1), for response bodies.

Why not leave it to llhttp (which parses the response head): its body callback crosses into Python once per chunk
with a fresh bytearray, through an attribute lookup, and that came to a third of the per-chunk parse cost of a
streamed token. A streaming server writes one HTTP chunk per SSE event and a read usually holds exactly that, so the
common read is decoded with one `find`, one `int` and one slice, without copying into a buffer.

`lone_events` goes one step further: for the whole chunks that each hold one SSE event of one `data:` line (after an
`event:` line naming its type, as the Responses and Messages APIs send every event, unless that type is `error`),
it returns the events' payloads directly, so neither this decoder nor the SSE parser has to touch them. A type
other than `error` changes nothing downstream (the stream accumulator reads only that one; the Responses and
Messages APIs repeat the type in the JSON).

Everything else is handled too, split at any byte: chunk extensions (`;name=value`, ignored), trailer fields
(skipped), a size line or CRLF split across reads. Malformed framing raises `ChunkedError`.
"""

from __future__ import annotations

import re

__all__ = ["ChunkedDecoder", "ChunkedError"]

_SIZE, _DATA, _DATA_END, _TRAILER, _DONE = range(5)
_MAX_LINE = 4096  # a size line or trailer field longer than this is not a chunked body
_HEX = frozenset(b"0123456789abcdefABCDEF")
# One regex call checks the whole framing of the common read: size line, one `data:` line, the blank line that ends
# the event, the CRLF that ends the chunk; then the size against the length, and that no CR (a line end in SSE) is
# inside. (A class of one excluded byte is 5x faster in `re` than `[^\r\n]`.) A chunk it does not match is tried
# once more with an `event:` line before the `data:` line (any type but `error`): a stream of named events pays
# the first try, a stream of plain ones (OpenAI chat's) nothing for the second.
_LONE_EVENT = re.compile(rb"([0-9a-fA-F]{1,16})\r\ndata: ([^\n]*)\n\n\r\n").match
_NAMED_EVENT = re.compile(rb"([0-9a-fA-F]{1,16})\r\nevent: (?!error\n)[^\r\n]*\ndata: ([^\n]*)\n\n\r\n").match


class ChunkedError(ValueError):
    """The body does not follow chunked transfer coding."""


def _chunk_size(line: bytes) -> int:
    size = line.split(b";", 1)[0].rstrip(b" \t")
    if not size or len(size) > 16 or not _HEX.issuperset(size):
        raise ChunkedError(f"bad chunk size line {line[:40]!r}")
    return int(size, 16)


class ChunkedDecoder:
    """`feed(data)` returns the body bytes it completes (a list of pieces, possibly empty); `complete` turns True
    at the end of the last chunk's trailer section, and `extra` holds any bytes that came after it."""

    __slots__ = ("_state", "_left", "_tail", "complete", "extra")

    def __init__(self) -> None:
        self._state = _SIZE
        self._left = 0  # data bytes still to come in the current chunk
        self._tail = b""  # an incomplete line (size, CRLF or trailer) carried to the next read
        self.complete = False
        self.extra = b""

    @property
    def at_boundary(self) -> bool:
        """Between chunks, nothing held: the next byte starts a chunk size line."""
        return self._state == _SIZE and not self._tail

    def lone_events(self, data: bytes) -> tuple[list[bytes], bytes]:
        """The payloads of the whole chunks at the start of `data` that each hold exactly one SSE event, `data: ...`
        with LF ends (what streaming servers write per token; after an `event:` line of any type but `error`), and
        the bytes after them, for `feed`. Only at a chunk boundary (else nothing is taken)."""
        if self._state != _SIZE or self._tail:
            return [], data
        # The first chunk is matched before the loop, with its own early return: a read of one chunk (the usual
        # one) then skips the loop and the slicing off of an empty rest (`python -m bench.hotpath` times it).
        m = _LONE_EVENT(data) or _NAMED_EVENT(data)
        if m is None:
            return [], data
        payload, pos = m[2], m.end()
        if int(m[1], 16) != pos - m.end(1) - 4 or b"\r" in payload:  # the size is the event's bytes
            return [], data
        if pos == len(data):  # the usual read: one chunk
            return [payload], b""
        out = [payload]
        end = len(data)
        while pos < end:
            m = _LONE_EVENT(data, pos) or _NAMED_EVENT(data, pos)
            if m is None:
                break
            payload, after = m[2], m.end()
            if int(m[1], 16) != after - m.end(1) - 4 or b"\r" in payload:
                break
            out.append(payload)
            pos = after
        return out, data[pos:]

    def feed(self, data: bytes) -> list[bytes]:
        if self._tail:
            data = self._tail + data
            self._tail = b""
        elif self._state == _SIZE:
            # The common read: exactly one whole chunk, with a plain hex size.
            i = data.find(b"\r\n")
            if 0 < i <= 16:
                size = data[:i]
                if _HEX.issuperset(size):
                    n = int(size, 16)
                    if n and len(data) == i + n + 4 and data.endswith(b"\r\n"):
                        return [data[i + 2 : i + 2 + n]]
        out: list[bytes] = []
        pos, end = 0, len(data)
        while pos < end:
            state = self._state
            if state == _DATA:
                take = min(self._left, end - pos)
                out.append(data[pos : pos + take])
                pos += take
                self._left -= take
                if not self._left:
                    self._state = _DATA_END
            elif state == _DATA_END:
                if end - pos < 2:
                    self._tail = data[pos:]
                    if self._tail != b"\r"[: len(self._tail)]:
                        raise ChunkedError(f"chunk data not followed by CRLF: {self._tail!r}")
                    return out
                if data[pos : pos + 2] != b"\r\n":
                    raise ChunkedError(f"chunk data not followed by CRLF: {data[pos : pos + 10]!r}")
                pos += 2
                self._state = _SIZE
            elif state == _DONE:
                self.extra += data[pos:]
                return out
            else:  # a line: chunk size, or a trailer field (an empty one ends the body)
                eol = data.find(b"\r\n", pos)
                if eol < 0:
                    if end - pos > _MAX_LINE:
                        raise ChunkedError("chunk size or trailer line too long")
                    self._tail = data[pos:]
                    return out
                line = data[pos:eol]
                pos = eol + 2
                if state == _SIZE:
                    n = _chunk_size(line)
                    if n:
                        self._left = n
                        self._state = _DATA
                    else:
                        self._state = _TRAILER
                elif not line:
                    self._state = _DONE
                    self.complete = True
        return out
