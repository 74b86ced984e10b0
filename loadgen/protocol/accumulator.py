"""Turns timestamped pieces of a streamed response body into a `RequestRecord`.

Pure: the network reader hands over `(arrival_time, bytes)` as they come off the socket, so this is tested with
byte streams cut at every possible point, and the reader stays a thin loop.

Tokens per chunk: when the server reports counts (a cumulative count such as vLLM's continuous usage, TGI's token
index or llama.cpp's `tokens_predicted`, or a per-chunk count such as Triton's `num_output_tokens`) from the first
token on, every chunk's tokens are the count's advance, counted at the chunk where the count moved (also when that
chunk's text is empty: a multibyte character held back, EOS). Otherwise each chunk with output is one token, and a
count that turns up later (totals on the last chunk) is not used for per-chunk counts: it would land every token
on the last chunk. When such a stream's final usage total disagrees with the chunks counted (a server that puts
several tokens in a chunk and says so only in its totals), the total is spread evenly over the token chunks at the
end (`TokenSource.USAGE_SPREAD`): per-token ITL and TPOT are then estimates, but not off by the tokens per chunk.

Kept text (opt-in per stream, `keep_text=True`: sessions send the reply back, a tokenizer counts each chunk's
tokens when the server streams no counts): the reply's text in `record.output_text` and, per token chunk, where
its text ends (`record.chunk_text_ends`). Such a stream reads on the Python path only (see `make_chunk_counter`).

A 200 whose body is not a stream (the server ignored `stream: true` and sent a whole completion, or a proxy sent a
page) is told apart by its first bytes: an SSE body starts with a field (`data:`, `event:`, `:`), never with `{`,
`[` or `<`.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

import orjson

from loadgen.measure.records import ErrorKind, RequestRecord, TokenSource
from loadgen.protocol import native
from loadgen.protocol.dialects import Chunk, Dialect, describe_error_body
from loadgen.protocol.dialects._base import error_message
from loadgen.protocol.dialects.anthropic import AnthropicMessages
from loadgen.protocol.dialects.openai import OpenAIChat, OpenAICompletions
from loadgen.protocol.dialects.responses import OpenAIResponses
from loadgen.protocol.native import fast_path_available
from loadgen.protocol.ndjson import NDJSONParser
from loadgen.protocol.output_text import call_reader, text_reader
from loadgen.protocol.sse import EventTooLarge, SSEEvent, SSEParser

__all__ = ["StreamAccumulator", "fast_path_available"]

_wire = native.wire

# Dialects whose token chunks `_wire.TokenChunkCounter` accounts exactly as `parse` + `_on_chunk` would, by the
# kind the counter reads them as (_wire_json.h: 0 completions, 1 chat, 2 Responses API, 3 Messages API).
_FAST_DIALECTS: dict[type, int] = {OpenAIChat: 1, OpenAICompletions: 0, OpenAIResponses: 2, AnthropicMessages: 3}


_NEVER = 1 << 62  # `cancel_at` of a stream the client lets finish


def _count(v: Any) -> int | None:
    """A token count the server reported: a non-negative int (not a bool), else None."""
    return v if type(v) is int and v >= 0 else None


class _SSEParser(SSEParser):
    """SSE, plus an `error:` field line dispatched as an "error" event.

    llama.cpp's server (before late 2025) reports an error inside a stream as `error: {...}\\n\\n`: a field the SSE
    spec ignores, so a strict parser drops the event and the stream merely looks cut short.
    """

    __slots__ = ()

    def _parse_block(self, block: bytes) -> SSEEvent | None:
        ev = super()._parse_block(block)
        if ev is None:
            for line in block.split(b"\n"):
                if line.startswith(b"error:"):
                    value = line[6:]
                    return SSEEvent(value[1:] if value[:1] == b" " else value, "error")
        return ev


class StreamAccumulator:
    __slots__ = (
        "record",
        "_dialect",
        "_parser",
        "_sse",
        "sse_idle",
        "_counted",
        "_exact",
        "saw_done",
        "finished",
        "_counter",
        "_sniff",
        "_content_type",
        "_text_of",
        "_pieces",
        "_text_len",
        "cancel_at",
        "cancelled",
        "_cancel_t",
    )

    def __init__(self, record: RequestRecord, dialect: Dialect, keep_text: bool = False) -> None:
        """`keep_text`: also keep the reply's text (`record.output_text`, `record.chunk_text_ends`; see
        output_text.py for what counts as text). Such a stream gets no C fast path (`make_chunk_counter`)."""
        self.record = record
        self._dialect = dialect
        self._parser: SSEParser | NDJSONParser = NDJSONParser() if dialect.framing == "ndjson" else _SSEParser()
        self._sse = isinstance(self._parser, SSEParser)
        # An SSE stream between events: a whole event's payload may be handed to `on_event` directly (an attribute,
        # not a property: it is read for every read of every stream).
        self.sse_idle = self._sse
        self._counted = 0  # tokens counted so far
        # Whether per-chunk token counts come from the server: decided by the first chunk that carried tokens.
        self._exact: bool | None = None
        self.saw_done = False
        # Set once the stream can be abandoned: its end marker seen, or an error that ends it.
        self.finished = False
        self._counter: Any = None  # the C fast path's TokenChunkCounter, if this stream has one
        # The first body bytes are still to be looked at (is this a stream at all?). Until then the C counter stays
        # disarmed, so those bytes always come here.
        self._sniff = True
        self._content_type = ""
        self._text_of: Callable[[bytes], str] | None = text_reader(dialect.name) if keep_text else None
        self._pieces: list[str] = []
        self._text_len = 0
        if keep_text:
            record.chunk_text_ends = array("l")
        # `traffic.cancel`: the client gives the stream up once this many tokens came (`give_up_after`), unless
        # the chunk that reaches it ends the reply; `cancelled` once it did.
        self.cancel_at = _NEVER
        self.cancelled = False
        self._cancel_t = 0.0  # the arrival of the read that reached the count

    def give_up_after(self, tokens: int) -> None:
        """Give the stream up (`cancelled`: the reader stops, the connection is closed) once `tokens` output
        tokens came. Such a stream reads on the Python path, which sees every chunk."""
        self.cancel_at = tokens

    # ---- the C fast path (see _wire.c) -----------------------------------------------------------------------------
    def make_chunk_counter(self) -> Any:
        """A `_wire.TokenChunkCounter` that may count this stream's plain token chunks into the record while it is
        armed, or None (no C half, or a dialect it does not know; the reader asks only where
        `fast_path_available()`). The reader arms it through `arm_fast_path` and disarms it through
        `disarm_fast_path`: between the two, the counter holds the token count and where counts come from, and the
        record gets its chunks directly."""
        kind = _FAST_DIALECTS.get(type(self._dialect))
        # A stream that keeps its text stays on the Python path: the C counter would have to decode the content
        # strings (JSON escapes, \u sequences) exactly as orjson does to keep parity, for the few streams that
        # need text (sessions, tokenizer counts). The cost is the Python path's, ~4 us a chunk instead of ~0.7.
        if kind is None or not self._sse or _wire is None or self._text_of is not None or self.cancel_at != _NEVER:
            return None
        self._counter = _wire.TokenChunkCounter(self.record, kind, TokenSource.SERVER)
        return self._counter

    def disarm_fast_path(self) -> None:
        """Before Python handles a read: the counter disarmed, and the count it reached moved back here."""
        counter = self._counter
        if counter is not None:
            state = counter.disarm()
            if state is not None:
                self._counted, exact, ended_at = state
                self._exact = None if exact < 0 else bool(exact)
                if ended_at is not None:
                    # The counter took the stream's end marker (`[DONE]`, which it reads as `parse` does): ended as
                    # `_on_chunk` ends it.
                    self._ended(ended_at)

    def arm_fast_path(self) -> None:
        """After Python handled a read that ended at an event boundary: if the stream is still going, the counter
        armed with this accumulator's count, so the next reads of whole token chunks are counted in C."""
        counter = self._counter
        if counter is not None and self.sse_idle and not self.finished and not self._sniff:
            exact = self._exact
            counter.arm(self._counted, -1 if exact is None else int(exact))

    def count_first(self, t: float, data: bytes) -> int:
        """The body's first bytes (the rest of the head's read, arrived at `t`): the leading whole chunks the C
        counter takes (token chunks, or the stream's end, as it takes them from any read), counted as they would be
        here; returns how many bytes it took. A chunk it takes is a `data:` event, so the body is a stream (as
        `on_event` concludes for a lone event) and need not be sniffed."""
        counter = self._counter
        if counter is None or not self.sse_idle or self.finished:
            return 0
        exact = self._exact
        counter.arm(self._counted, -1 if exact is None else int(exact))
        used: int = counter.try_count(t, data)
        self.disarm_fast_path()
        if used:
            self._sniff = False
        return used

    def on_connection(self, connect_s: float | None, tls_s: float | None) -> None:
        """This request opened its connection (TCP connect and TLS handshake times), or reused one (None)."""
        self.record.connect_s = connect_s
        self.record.tls_s = tls_s

    def on_sent(self, t: float) -> None:
        self.record.sent = t

    def on_head(self, content_type: str) -> None:
        """The 200 response's Content-Type, to name what came instead of a stream."""
        self._content_type = content_type.strip().lower()

    @property
    def fatal(self) -> bool:
        """The stream carried something that ends it badly, or the client gave it up: the rest of the body is not
        worth reading."""
        return self.record.error is not None or self.cancelled

    def feed(self, t: float, data: bytes) -> None:
        if self._sniff and self._not_a_stream(t, data):
            return
        parser = self._parser
        try:
            events = parser.feed(data)
        except EventTooLarge as e:
            # A server that never ends its event: the stream fails now (the connection is closed, not reused),
            # not after request_timeout with the whole of it held.
            self._fail(ErrorKind.MALFORMED, str(e))
            self.record.partial_bytes = e.head
            return
        if self._sse:
            self.sse_idle = parser.idle  # type: ignore[union-attr]
        for ev in events:
            if self.finished:
                return
            self._on_payload(t, ev.data, ev.event)

    def on_event(self, t: float, payload: bytes) -> None:
        """One whole default-type SSE event's data, taken off the wire without the SSE parser (see chunked.py)."""
        self._sniff = False
        self._on_chunk(t, self._dialect.parse(payload), payload, None)

    def _not_a_stream(self, t: float, data: bytes) -> bool:
        """Looks at the first body bytes: True (and the record failed) when they are not a stream."""
        head = data.lstrip()
        if not head:
            return False  # only whitespace so far: the next bytes decide
        self._sniff = False
        html = self._content_type.startswith("text/html")
        if not html and head[:1] not in ((b"<",) if not self._sse else (b"{", b"[", b"<")):
            return False
        rec = self.record
        ct = self._content_type or "no Content-Type"
        if head[:1] == b"{":
            # A whole JSON answer: an error the server sent with status 200 says what broke; else a completion.
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                obj = None
            msg = error_message(obj) if isinstance(obj, dict) else None
            if msg is not None:
                self._fail(ErrorKind.SERVER_ERROR, msg)
                rec.partial_bytes = data[:2048]
                rec.done = t
                return True
        self._fail(
            ErrorKind.NOT_A_STREAM,
            f"status 200 but the body is not a {'SSE' if self._sse else 'NDJSON'} stream ({ct}): the server ignored "
            "stream: true, or something in front of it answered",
        )
        rec.partial_bytes = data[:2048]
        rec.done = t
        return True

    def _on_payload(self, t: float, payload: bytes, event: str | None) -> None:
        self._on_chunk(t, self._dialect.parse(payload), payload, event)

    def _on_chunk(self, t: float, chunk: Chunk, payload: bytes, event: str | None) -> None:
        rec = self.record
        if event == "error":  # some servers name the event instead of the payload
            self._fail(ErrorKind.SERVER_ERROR, chunk.error or describe_error_body(payload))
            rec.partial_bytes = payload[:2048]
            return
        if chunk.error is not None:
            self._fail(ErrorKind.MALFORMED if chunk.malformed else ErrorKind.SERVER_ERROR, chunk.error)
            rec.partial_bytes = payload[:2048]
            return
        k = 0
        from_server = False
        if self._exact is not False:
            if chunk.tokens is not None:
                k, from_server = chunk.tokens, True
            elif chunk.cum_tokens is not None:
                k, from_server = chunk.cum_tokens - self._counted, True
            if from_server and k <= 0 and chunk.has_output and self._exact is None:
                # Text before the count moved: a count that lags the text cannot time the first token.
                from_server = False
        if not from_server:
            k = 1 if chunk.has_output else 0
        text_of = self._text_of
        if text_of is not None:
            piece = text_of(payload)
            if piece:
                self._pieces.append(piece)
                self._text_len += len(piece)
            if k > 0:
                rec.chunk_text_ends.append(self._text_len)  # type: ignore[union-attr]
        if k > 0:
            if self._exact is None:
                self._exact = from_server
                if from_server:
                    rec.token_source = TokenSource.SERVER
            self._counted += k
            if chunk.reasoning:  # only Python sees these chunks: the C counter declines them
                if rec.reasoning_chunks is None:
                    rec.reasoning_chunks = array("l")
                rec.reasoning_chunks.append(len(rec.chunk_times))
            elif chunk.tool_call:  # a tool call's piece: Python's too
                if rec.tool_call_chunks is None:
                    rec.tool_call_chunks = array("l")
                rec.tool_call_chunks.append(len(rec.chunk_times))
            rec.chunk_times.append(t)
            rec.chunk_tokens.append(k)
        if chunk.tool_call and text_of is not None:
            # A session sends the call back (traffic/sessions.py): every piece, also one that carried no token
            # (the Responses API's `output_item.added` with the call's id and name).
            self._keep_call(payload)
        timings = chunk.server_timings
        if timings is not None:
            rec.server_timings = timings
            cached = _count(timings.get("cache_n"))  # llama.cpp: prompt tokens reused from its cache
            if cached is not None:
                rec.cached_prompt_tokens = cached
        usage = chunk.usage
        if usage is not None:
            pt = usage.get("prompt_tokens")
            ct = usage.get("completion_tokens")
            if isinstance(pt, int):
                rec.prompt_tokens = pt
            if isinstance(ct, int):
                rec.output_tokens = ct
            details = usage.get("prompt_tokens_details")  # OpenAI / vLLM / SGLang
            if type(details) is dict:
                cached = _count(details.get("cached_tokens"))
                if cached is not None:
                    rec.cached_prompt_tokens = cached
            details = usage.get("completion_tokens_details")  # OpenAI: the reasoning tokens among the output
            if type(details) is dict:
                reasoning = _count(details.get("reasoning_tokens"))
                if reasoning is not None:
                    rec.reasoning_tokens = reasoning
        if chunk.finish_reason is not None:
            rec.finish_reason = chunk.finish_reason
        elif self._counted >= self.cancel_at and not chunk.done and not self.cancelled:
            # Given up with this read (a chunk that says why the reply ended ends it: nothing left to give up). The
            # rest of the read arrived with it and is kept; a reply whose end came in it was whole already.
            self.cancelled = True
            self._cancel_t = t
        if chunk.done:
            # [DONE], or a final chunk that also carries the last tokens and totals (TGI, llama.cpp, Ollama).
            self._ended(t)

    def _ended(self, t: float) -> None:
        """The stream's end marker came at `t` (read here, or by the C counter: `disarm_fast_path`)."""
        self.saw_done = True
        self.finished = True
        self.record.done = t

    def finish(self, t: float) -> RequestRecord:
        """End of a complete body. A stream that ended without its end marker is `stream_interrupted`, unless the
        dialect has no end marker (Triton), where the complete body is the orderly end."""
        self.disarm_fast_path()
        rec = self.record
        if self.cancelled and not self.saw_done:
            rec.cancelled = "tokens"
            rec.done = self._cancel_t
            self.close_text()
            return rec
        self.cancelled = False  # the reply came whole in the read that reached the count: it completed
        _, leftover = self._parser.close()
        if leftover and not self.finished and isinstance(self._parser, NDJSONParser):
            # NDJSON's last object may come without a trailing newline; one that does not parse was cut short.
            chunk = self._dialect.parse(leftover)
            if not chunk.malformed:
                self._on_chunk(t, chunk, leftover, None)
                leftover = b""
        if rec.done is None:
            rec.done = t
        if rec.error is None and not self.saw_done:
            if self._dialect.ends_at_eof and not leftover:
                self.saw_done = True
            else:
                rec.error = ErrorKind.STREAM_INTERRUPTED
                rec.error_detail = "stream ended before its end marker ([DONE] / final chunk)"
                rec.partial_bytes = leftover[:2048]
        if rec.error is None and self._exact is False:
            self._spread_usage()
        self.close_text()
        return rec

    def _keep_call(self, payload: bytes) -> None:
        """The reply's tool call, piece by piece, into `record.tool_call_reply` (id, name, arguments)."""
        call_id, name, arguments = call_reader(self._dialect.name)(payload)
        kept = self.record.tool_call_reply
        if kept is None:
            kept = self.record.tool_call_reply = {"id": "", "name": "", "arguments": ""}
        kept["id"] = kept["id"] or call_id
        kept["name"] = kept["name"] or name
        kept["arguments"] += arguments

    def close_text(self) -> None:
        """The text kept so far into `record.output_text` (when keeping it): at the end of the stream, however it
        ended (the request stream calls it for a stream cut at the stop)."""
        if self._pieces:
            self.record.output_text = "".join(self._pieces)

    def _spread_usage(self) -> None:
        """No per-chunk counts, but a usage total: when it disagrees with the chunks, spread it over them evenly.

        A total one above the chunks is left alone: that is the end-of-sequence token, which servers count and
        send with empty text, not a sign of several tokens per chunk."""
        rec = self.record
        total, n = rec.output_tokens, len(rec.chunk_tokens)
        if total is None or n == 0 or total <= n + 1:
            return
        base, extra = divmod(total, n)
        # The remainder to the later chunks: the first chunk's share is what TPOT leaves out, and a stream's first
        # chunk carries no more than the others.
        rec.chunk_tokens[:] = array("l", [base + (i >= n - extra) for i in range(n)])
        rec.token_source = TokenSource.USAGE_SPREAD

    def refused(self, t: float, status: int, body: bytes, location: str | None = None) -> RequestRecord:
        """A response other than 200, whose body (the first bytes of it) arrived by `t`: the server's own message
        (`error.message`, TGI / Ollama `error`, FastAPI `detail`), and for a redirect where it pointed to."""
        rec = self.record
        rec.done = t
        rec.error = ErrorKind.for_status(status)
        # Kept longer than reports show, so that a key echoed in it is redacted whole (the lane cuts it to 500).
        detail = describe_error_body(body, 2000) if body.strip() else f"status {status} with no body"
        if location is not None:
            detail = f"redirected to {location} (is base_url right?): {detail}"
        rec.error_detail = detail
        rec.partial_bytes = body[:2048]
        self.finished = True
        return rec

    def fail(self, t: float, error_class: str, detail: str) -> RequestRecord:
        """The transport failed mid-stream (reset, timeout): keep every timing received so far. After the stream's
        end marker nothing that was measured is missing, so that is still a success (a server that closes without
        the chunked terminator)."""
        self.disarm_fast_path()
        rec = self.record
        if rec.error is None and self.saw_done:
            return self.finish(t)
        _, leftover = self._parser.close()
        if rec.error is None:  # else the first error stands, with the bytes it kept
            self._fail(error_class, detail)
            rec.partial_bytes = leftover[:2048]
        if rec.done is None:
            rec.done = t
        self.close_text()
        return rec

    def _fail(self, error_class: str, detail: str) -> None:
        self.record.error = error_class
        self.record.error_detail = detail[:500]
        self.finished = True
