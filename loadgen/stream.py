"""Turns timestamped pieces of a streamed response body into a `RequestRecord`.

Pure: the network reader hands over `(arrival_time, bytes)` as they come off the socket, so this is tested with
byte streams cut at every possible point, and the reader stays a thin loop.
"""

from __future__ import annotations

from .dialects import Dialect
from .ndjson import NDJSONParser
from .records import ErrorClass, RequestRecord, TokenSource
from .sse import SSEParser

__all__ = ["StreamAccumulator"]


class StreamAccumulator:
    __slots__ = ("record", "_dialect", "_parser", "_last_cum", "saw_done", "finished")

    def __init__(self, record: RequestRecord, dialect: Dialect) -> None:
        self.record = record
        self._dialect = dialect
        self._parser: SSEParser | NDJSONParser = NDJSONParser() if dialect.framing == "ndjson" else SSEParser()
        self._last_cum = 0
        self.saw_done = False
        # Set once the stream can be abandoned: its end marker seen, or an error that ends it.
        self.finished = False

    def on_sent(self, t: float) -> None:
        self.record.sent = t

    @property
    def fatal(self) -> bool:
        """The stream carried something that ends it badly; the rest of the body is not worth reading."""
        return self.record.error is not None

    def feed(self, t: float, data: bytes) -> None:
        for ev in self._parser.feed(data):
            if self.finished:
                return
            self._on_payload(t, ev.data, ev.event)

    def _on_payload(self, t: float, payload: bytes, event: str | None) -> None:
        rec = self.record
        chunk = self._dialect.parse(payload)
        if chunk.error is not None:
            is_malformed = chunk.error.startswith(("malformed", "stream chunk is not"))
            self._fail(ErrorClass.MALFORMED if is_malformed else ErrorClass.SERVER_ERROR, chunk.error)
            return
        if event == "error":  # some servers name the event instead of the payload
            self._fail(ErrorClass.SERVER_ERROR, payload[:500].decode("utf-8", "replace"))
            return
        if chunk.cum_tokens is not None:
            k = chunk.cum_tokens - self._last_cum
            if k > 0:
                self._last_cum = chunk.cum_tokens
            rec.token_source = TokenSource.SERVER
        else:
            k = 1 if chunk.has_output else 0
        if k > 0:
            rec.chunk_times.append(t)
            rec.chunk_tokens.append(k)
        usage = chunk.usage
        if usage is not None:
            pt = usage.get("prompt_tokens")
            ct = usage.get("completion_tokens")
            if isinstance(pt, int):
                rec.prompt_tokens = pt
            if isinstance(ct, int):
                rec.output_tokens = ct
        if chunk.done:
            # [DONE], or a final chunk that also carries the last tokens and totals (TGI, llama.cpp, Ollama).
            self.saw_done = True
            self.finished = True
            rec.done = t

    def finish(self, t: float) -> RequestRecord:
        """End of body. A stream that ended without its end marker is `stream_interrupted`."""
        rec = self.record
        _, leftover = self._parser.close()
        if leftover and not self.finished and isinstance(self._parser, NDJSONParser):
            # NDJSON's last object may come without a trailing newline.
            self._on_payload(t, leftover, None)
            leftover = b""
        if rec.done is None:
            rec.done = t
        if rec.error is None and not self.saw_done:
            rec.error = ErrorClass.STREAM_INTERRUPTED
            rec.error_detail = "stream ended before its end marker ([DONE] / final chunk)"
            rec.partial_bytes = leftover[:2048]
        return rec

    def fail(self, t: float, error_class: str, detail: str) -> RequestRecord:
        """The transport failed mid-stream (reset, timeout): keep every timing received so far."""
        rec = self.record
        if rec.error is None:
            self._fail(error_class, detail)
        _, leftover = self._parser.close()
        rec.partial_bytes = leftover[:2048]
        if rec.done is None:
            rec.done = t
        return rec

    def _fail(self, error_class: str, detail: str) -> None:
        self.record.error = error_class
        self.record.error_detail = detail[:500]
        self.finished = True
