"""Reads a whole (non-streamed) reply into a `RequestRecord`: a variant's `stream: false`.

The counterpart of `StreamAccumulator` for a body that is one JSON document (OpenAI's `chat.completion` /
`text_completion`): the connection hands over its bytes as they arrive, and the document is read once, when the
body is complete. What such a reply can tell is its end and its totals: E2E (`done − sent`, `done` the arrival stamp
of the body's last read) and the output tokens of its usage. There is no first token and no gap between tokens, so
the record has no chunks (`chunk_times` empty, `streamed` False): TTFT, ITL, ICL and TPOT are not measured rather
than made up, and the report says so.

Both read paths take the same bytes here: the C fast half counts only SSE token chunks (`make_chunk_counter` gives
none for a whole reply), so with or without it every read of the body comes to `feed`.
"""

from __future__ import annotations

from typing import Any

from loadgen.measure.records import ErrorKind, RequestRecord, TokenSource
from loadgen.protocol.dialects import Dialect, describe_error_body

__all__ = ["MAX_REPLY_BYTES", "WholeReplyAccumulator"]

# A reply longer than this is no completion (32k tokens of text are ~150 KB): the request fails as malformed instead
# of the body being held for as long as the server sends it.
MAX_REPLY_BYTES = 8 << 20


def _count(v: Any) -> int | None:
    return v if type(v) is int and v >= 0 else None


class WholeReplyAccumulator:
    """One whole reply's bytes, read into its record at the end (`finish`). The connection's `BodyConsumer`."""

    __slots__ = ("record", "_dialect", "_body", "_size", "_keep_text", "_content_type", "finished", "sse_idle")

    def __init__(self, record: RequestRecord, dialect: Dialect, keep_text: bool = False) -> None:
        """`keep_text`: keep the reply's text in `record.output_text` (sessions, `quality:`)."""
        self.record = record
        record.streamed = False
        self._dialect = dialect
        self._body: list[bytes] = []
        self._size = 0
        self._keep_text = keep_text
        self._content_type = ""
        self.finished = False
        self.sse_idle = False  # never handed SSE events: every read comes to `feed`

    # ---- what the connection calls ---------------------------------------------------------------------------------
    def on_connection(self, connect_s: float | None, tls_s: float | None) -> None:
        self.record.connect_s = connect_s
        self.record.tls_s = tls_s

    def on_sent(self, t: float) -> None:
        self.record.sent = t

    def on_head(self, content_type: str) -> None:
        self._content_type = content_type.strip().lower()

    @property
    def fatal(self) -> bool:
        return self.record.error is not None

    def feed(self, t: float, data: bytes) -> None:
        self._size += len(data)
        if self._size > MAX_REPLY_BYTES:
            self._fail(ErrorKind.MALFORMED, f"reply body over {MAX_REPLY_BYTES >> 20} MiB")
            self.record.partial_bytes = b"".join(self._body)[:2048]
            self.record.done = t
            return
        self._body.append(data)

    def on_event(self, t: float, payload: bytes) -> None:  # pragma: no cover - sse_idle is never set
        self.feed(t, payload)

    def make_chunk_counter(self) -> Any:
        """No C fast half: it counts SSE token chunks, and a whole reply has none."""
        return None

    def disarm_fast_path(self) -> None:
        pass

    def arm_fast_path(self) -> None:
        pass

    def count_first(self, t: float, data: bytes) -> int:  # pragma: no cover - it has no chunk counter
        return 0

    # ---- what the request stream calls -----------------------------------------------------------------------------
    def finish(self, t: float) -> RequestRecord:
        """The body is complete (its last read arrived at `t`): read the reply."""
        rec = self.record
        if rec.error is not None:
            return rec
        body = b"".join(self._body)
        rec.done = t
        head = body.lstrip()[:1]
        if head not in (b"{", b"["):  # an object, or a list (TEI's /rerank); the dialect reads which it expects
            what = self._content_type or "no Content-Type"
            streamed = body.lstrip()[:5] in (b"data:", b"event")
            self._fail(
                ErrorKind.MALFORMED,
                f"status 200 but the body is not a JSON reply ({what})"
                + (": the server streamed though stream: false was asked" if streamed else ""),
            )
            rec.partial_bytes = body[:2048]
            return rec
        chunk, text = self._dialect.parse_whole(body)
        if chunk.error is not None:
            self._fail(ErrorKind.MALFORMED if chunk.malformed else ErrorKind.SERVER_ERROR, chunk.error)
            rec.partial_bytes = body[:2048]
            return rec
        usage = chunk.usage
        if usage is not None:
            rec.prompt_tokens = _count(usage.get("prompt_tokens"))
            rec.output_tokens = _count(usage.get("completion_tokens"))
            details = usage.get("prompt_tokens_details")
            if type(details) is dict:
                rec.cached_prompt_tokens = _count(details.get("cached_tokens"))
            details = usage.get("completion_tokens_details")
            if type(details) is dict:
                rec.reasoning_tokens = _count(details.get("reasoning_tokens"))
        rec.token_source = TokenSource.USAGE if rec.output_tokens is not None else TokenSource.UNCOUNTED
        rec.finish_reason = chunk.finish_reason
        if self._keep_text:
            rec.output_text = text
        self.finished = True
        return rec

    def refused(self, t: float, status: int, body: bytes, location: str | None = None) -> RequestRecord:
        """A response other than 200 (as `StreamAccumulator.refused`)."""
        rec = self.record
        rec.done = t
        rec.error = ErrorKind.for_status(status)
        detail = describe_error_body(body, 2000) if body.strip() else f"status {status} with no body"
        if location is not None:
            detail = f"redirected to {location} (is base_url right?): {detail}"
        rec.error_detail = detail
        rec.partial_bytes = body[:2048]
        self.finished = True
        return rec

    def fail(self, t: float, error_class: str, detail: str) -> RequestRecord:
        """The transport failed before the body was complete: nothing of the reply can be read."""
        rec = self.record
        if rec.error is None:
            self._fail(error_class, detail)
            rec.partial_bytes = b"".join(self._body)[:2048]
        if rec.done is None:
            rec.done = t
        return rec

    def close_text(self) -> None:
        """Nothing to keep before the reply is whole (a request cut at the stop has no text)."""

    def _fail(self, error_class: str, detail: str) -> None:
        self.record.error = error_class
        self.record.error_detail = detail[:500]
        self.finished = True
