"""Raw per-request timestamps, and every latency metric derived from them in one place.

All times are seconds on one monotonic clock (`time.monotonic()` / `perf_counter` are the same CLOCK_MONOTONIC on
Linux, shared across processes on a host). Only chunks that carried at least one generated token are kept in
`chunk_times`: role-only, usage-only and `[DONE]` chunks are not tokens and would otherwise corrupt TTFT and ITL.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from loadgen.traffic.references import Reference

__all__ = ["ErrorKind", "RequestRecord", "TokenSource"]


def _cancelled(value: Any) -> str:
    """A raw row's `cancelled`: "time" / "tokens" (a row of an older shard says only true: by tokens, the only way
    that had no timer of its own)."""
    if isinstance(value, str):
        return value
    return "tokens" if value else ""


class ErrorKind:
    CONNECT = "connect"
    TIMEOUT = "timeout"
    HTTP_429 = "http_429"
    HTTP_4XX = "http_4xx"
    HTTP_5XX = "http_5xx"
    STREAM_INTERRUPTED = "stream_interrupted"
    MALFORMED = "malformed"
    SERVER_ERROR = "server_error"  # an error payload inside a 200 stream
    # A redirect: the base_url (or a proxy in front of it) is wrong. A configuration problem, not a server error.
    HTTP_3XX = "http_3xx"
    # A 2xx other than 200 (204, 206, ...): nothing a streaming endpoint should answer.
    HTTP_2XX = "http_2xx_unexpected"
    # A 200 whose body is not a stream (the server ignored `stream: true`, or a proxy answered with a page).
    NOT_A_STREAM = "not_a_stream"
    ALL = (
        CONNECT,
        TIMEOUT,
        HTTP_429,
        HTTP_4XX,
        HTTP_5XX,
        HTTP_3XX,
        HTTP_2XX,
        NOT_A_STREAM,
        STREAM_INTERRUPTED,
        MALFORMED,
        SERVER_ERROR,
    )

    @staticmethod
    def for_status(status: int) -> str:
        """The class of a non-200 response status."""
        if status == 429:
            return ErrorKind.HTTP_429
        if 400 <= status < 500:
            return ErrorKind.HTTP_4XX
        if 300 <= status < 400:
            return ErrorKind.HTTP_3XX
        if 200 <= status < 300:
            return ErrorKind.HTTP_2XX
        return ErrorKind.HTTP_5XX


class TokenSource:
    """Where per-chunk token counts came from; the report states it because ITL depends on it."""

    SERVER = "server"  # cumulative usage in every chunk (continuous_usage_stats) or per-chunk timings
    ONE_PER_CHUNK = "one_per_chunk"  # no per-chunk counts: each content chunk assumed to be one token
    # No per-chunk counts, but the final usage total disagreed with the chunks: the total spread evenly over the
    # token chunks (ITL and TPOT are then estimates, and the report says so).
    USAGE_SPREAD = "usage_spread"
    # No per-chunk counts from the server, but the scenario's tokenizer counted each chunk's text (the whole reply
    # tokenized once, each token given to the chunk whose text holds its end: measure/token_counts.py). Totals still
    # come from the server's usage; per-chunk counts, ITL and TPOT from the tokenizer.
    TOKENIZER = "tokenizer"
    # A whole (non-streamed) reply: its output tokens from the server's usage, and no chunks to count per chunk.
    USAGE = "usage"
    # A whole reply without a usage count: its output tokens are unknown (0 in the totals).
    UNCOUNTED = "uncounted"


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    variant: str
    mix: str
    bucket: str = ""
    scheduled: float | None = None
    sent: float = 0.0
    done: float | None = None
    status: int = 0
    error: str | None = None
    error_detail: str = ""
    # Arrays, not lists: no objects per element, so the cyclic GC does not walk them. With lists, the in-flight
    # records' thousands of floats made each gen-1 collection a pause of the event loop that every stream's
    # timestamps queued behind (the loop-lag column of bench/run.py's capacity part shows it).
    chunk_times: array[float] = field(default_factory=lambda: array("d"))
    chunk_tokens: array[int] = field(default_factory=lambda: array("l"))
    token_source: str = TokenSource.ONE_PER_CHUNK
    prompt_tokens: int | None = None  # from the server's usage
    output_tokens: int | None = None  # from the server's usage
    # Prompt tokens the server served from its prefix cache, when it says (OpenAI / vLLM
    # `usage.prompt_tokens_details.cached_tokens`, llama.cpp `timings.cache_n`); None when it does not report it.
    cached_prompt_tokens: int | None = None
    prompt_tokens_target: int = 0
    # Of the target, the part a prefix cache could reuse: the mix's system prompt and any shared documents.
    shared_prefix_tokens: int = 0
    # Its turn in a multi-turn session (1 opens it; traffic/sessions.py); 0: a request of no session.
    turn: int = 0
    # Its priority class (`traffic.classes`); "": the scenario has none (one implicit class, kept per variant only).
    priority_class: str = ""
    # The images it carried (a mix's `images`); None: its mix carries none.
    images: int | None = None
    # The model it named when its variant lists LoRA adapters (`variants[].adapters`, the base model's name too
    # when listed); "": the variant has none, every request named its `model`.
    adapter: str = ""
    max_tokens: int = 0
    warmup: bool = False
    partial_bytes: bytes = b""
    # Why the server ended the stream ("stop" = end of sequence, "length" = max_tokens, ...), when it said.
    finish_reason: str | None = None
    # Opening a new connection for this request (None: it reused a kept-alive one). Not part of TTFT, which runs
    # from the request write; reported beside it.
    connect_s: float | None = None
    tls_s: float | None = None
    # Still in flight when the run stopped: counted and shown, its tokens inside the window count for throughput,
    # but it is neither an error nor a latency sample (it did not finish).
    cut_by_stop: bool = False
    # The server's own timings for this request (llama.cpp `timings`, Ollama durations), in llama.cpp's key names
    # and milliseconds: ground truth to check TTFT / TPOT against.
    server_timings: dict[str, Any] | None = None
    # The reply's text, kept only when the stream was asked to keep it (`StreamAccumulator(keep_text=True)`:
    # sessions, tokenizer counts); "" otherwise. Neither it nor the ends below go into raw rows or the aggregate:
    # a long reply per request would bloat both, and nothing downstream of the recorder needs them.
    output_text: str = ""
    # With the text kept: for each token chunk (aligned with `chunk_times`), the length in characters of
    # `output_text` up to the end of that chunk's text (a chunk's text is output_text[ends[i-1]:ends[i]]); text of
    # chunks that carried no token belongs to the next token chunk. None when the text was not kept.
    chunk_text_ends: array[int] | None = None
    # The per-request SLOs (`goodput:`) it missed, judged by the recorder: () met them all, None not judged (it
    # failed, or the scenario sets none). Not in raw rows: a rebuild judges again from the timings.
    goodput_misses: tuple[str, ...] | None = None
    # Why it was a cold request, "" when warm (the stream's "first", the first after an "idle" gap, or on a
    # "new_connection"): reported apart from the warm steady state (`Aggregate.starts`).
    cold: str = ""
    # A dataset row's reference answer (`expected`); judged against `output_text` where replies are kept
    # (measure/outputs.py). Not in raw rows.
    reference: Reference | None = None
    # A reasoning model's thinking: the indices (into `chunk_times`) of the token chunks that carried only reasoning
    # text (`delta.reasoning_content` / `delta.reasoning`), None when none did; and the reasoning tokens the server's
    # usage counted (`completion_tokens_details.reasoning_tokens`), when it said. See measure/reasoning.py.
    reasoning_chunks: array[int] | None = None
    reasoning_tokens: int | None = None
    # Tools (`traffic.mixes[].tools`): the request carried tools or a response_format, and the indices (into
    # `chunk_times`) of the token chunks that carried a tool call's pieces (`delta.tool_calls`), None when none did.
    # See measure/tool_calls.py.
    carried_tools: bool = False
    tool_call_chunks: array[int] | None = None
    # A reply a `response_format` asked for, judged (measure/structured.py): "valid", "not_json" or "off_schema";
    # "" when the request asked for none or did not succeed.
    structured: str = ""
    # With the text kept (a session): the reply's tool call, {id, name, arguments}, None when it made none. Not in
    # raw rows: the next turn sends it back (traffic/sessions.py).
    tool_call_reply: dict[str, str] | None = None
    # The W3C `traceparent` header it carried (`tracing:`; protocol/traceparent.py), None without one: its trace id
    # joins a server's spans to this record.
    traceparent: str | None = None
    # False: a whole reply (the variant's `stream: false`, protocol/whole_reply.py): no chunks, so no TTFT, ITL or
    # TPOT (not measured, not censored); E2E and the usage's totals only.
    streamed: bool = True
    # Given up by the client mid-reply (`traffic.cancel`, as a user closing the tab): "time" (after a drawn time) or
    # "tokens" (after a drawn count of tokens); "" when it was not. Neither a success nor an error: how it counts is
    # its fate's row (measure/fates.py).
    cancelled: str = ""
    # How it ended (measure/fates.py `Fate`), stamped by the recorder that knows the window (a request that ended in
    # the drain is `drained`); "" until then. Exports name it; the figures ask the fate table themselves.
    fate: str = ""

    # ---- derived metrics (seconds) -------------------------------------------------------------------------
    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def first_token(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None

    @property
    def ttft(self) -> float | None:
        return self.chunk_times[0] - self.sent if self.chunk_times else None

    @property
    def e2e(self) -> float | None:
        return None if self.done is None else self.done - self.sent

    @property
    def connect_start(self) -> float:
        """When the request began to go out: before the TCP connect and TLS handshake it opened, if any (`sent` is
        stamped after them, at the request write)."""
        return self.sent - (self.connect_s or 0.0) - (self.tls_s or 0.0)

    @property
    def queue_delay(self) -> float | None:
        """Open loop: how long the arrival waited in the client for a free sender, connect start − scheduled (the
        time to open a connection is the target's, reported apart as `connect_s` / `tls_s`)."""
        return None if self.scheduled is None else self.connect_start - self.scheduled

    @property
    def ttft_from_schedule(self) -> float | None:
        """Open loop: first token − scheduled, what a user of the service waits for the first token."""
        if self.scheduled is None or not self.chunk_times:
            return None
        return self.chunk_times[0] - self.scheduled

    @property
    def e2e_from_schedule(self) -> float | None:
        """Open loop: done − scheduled, client-side queueing included."""
        return None if self.scheduled is None or self.done is None else self.done - self.scheduled

    @property
    def tokens_received(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def output_count_beyond_chunks(self) -> int:
        """How many more tokens the server's usage counts than the chunks carried (0 without usage)."""
        return 0 if self.output_tokens is None else max(self.output_tokens - self.tokens_received, 0)

    @property
    def output_token_count(self) -> int:
        """Server usage when it sent one, else what the chunks added up to."""
        return self.output_tokens if self.output_tokens is not None else self.tokens_received

    def itl_samples(self) -> list[tuple[float, int]]:
        """Per-token inter-token latency as (gap/k, k): a chunk with k tokens after gap g is k samples of g/k."""
        t, n = self.chunk_times, self.chunk_tokens
        return [((t[i] - t[i - 1]) / n[i], n[i]) for i in range(1, len(t)) if n[i] > 0]

    def icl_samples(self) -> list[float]:
        """Inter-chunk latency: one sample per gap between token-carrying chunks (what the wire shows)."""
        t = self.chunk_times
        return [t[i] - t[i - 1] for i in range(1, len(t))]

    @property
    def tpot(self) -> float | None:
        """(last_token − first_token) / (output_tokens − tokens_in_first_chunk).

        Dividing by n − 1 instead comes out low whenever the first chunk already carries several tokens.
        """
        if len(self.chunk_times) < 2:
            return None
        if self.token_source == TokenSource.SERVER or self.token_source == TokenSource.TOKENIZER:
            # Exact per-chunk counts: exactly the tokens that arrived inside the (first, last) span. The server's
            # usage total can include a token that never came as a chunk (EOS with an empty delta), and the
            # tokenizer counts only the text that came.
            denom = self.tokens_received - self.chunk_tokens[0]
        else:
            denom = self.output_token_count - self.chunk_tokens[0]
            if self.token_source == TokenSource.ONE_PER_CHUNK and self.output_count_beyond_chunks == 1:
                # A usage total one above the chunks is the end-of-sequence token (the accumulator's rule), which
                # came with no text after the last chunk: outside the (first, last) span.
                denom -= 1
        if denom <= 0:
            return None
        return (self.chunk_times[-1] - self.chunk_times[0]) / denom

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> RequestRecord:
        """A raw shard row back into a record (the master recovers a lost worker's last rows this way)."""
        rec = cls(
            str(row["id"]),
            str(row["variant"]),
            str(row["mix"]),
            str(row.get("bucket", "")),
            scheduled=row.get("scheduled"),
            sent=float(row.get("sent") or 0.0),
            done=row.get("done"),
            status=int(row.get("status") or 0),
            error=row.get("error"),
            error_detail=str(row.get("error_detail") or ""),
            chunk_times=array("d", row.get("chunk_times") or ()),
            chunk_tokens=array("l", row.get("chunk_tokens") or ()),
            token_source=str(row.get("token_source") or TokenSource.ONE_PER_CHUNK),
            prompt_tokens=row.get("prompt_tokens"),
            output_tokens=row.get("output_tokens"),
            cached_prompt_tokens=row.get("cached_prompt_tokens"),
            prompt_tokens_target=int(row.get("prompt_tokens_target") or 0),
            shared_prefix_tokens=int(row.get("shared_prefix_tokens") or 0),
            turn=int(row.get("turn") or 0),
            priority_class=str(row.get("class") or ""),
            images=row.get("images"),
            adapter=str(row.get("adapter") or ""),
            max_tokens=int(row.get("max_tokens") or 0),
            warmup=bool(row.get("warmup")),
            finish_reason=row.get("finish_reason"),
            connect_s=row.get("connect_s"),
            tls_s=row.get("tls_s"),
            cut_by_stop=bool(row.get("cut_by_stop")),
            cold=str(row.get("cold") or ""),
            reasoning_chunks=array("l", row["reasoning_chunks"]) if row.get("reasoning_chunks") else None,
            reasoning_tokens=row.get("reasoning_tokens"),
            carried_tools=bool(row.get("carried_tools")),
            structured=str(row.get("structured") or ""),
            tool_call_chunks=array("l", row["tool_call_chunks"]) if row.get("tool_call_chunks") else None,
            traceparent=row.get("traceparent"),
            streamed=row.get("streamed", True) is not False,
            cancelled=_cancelled(row.get("cancelled")),
            fate=str(row.get("fate") or ""),
        )
        return rec

    def to_json(self) -> dict[str, Any]:
        """One JSONL row for raw record shards: raw timestamps plus the headline derived values."""
        return {
            "id": self.request_id,
            "variant": self.variant,
            "mix": self.mix,
            "bucket": self.bucket,
            "scheduled": self.scheduled,
            "sent": self.sent,
            "done": self.done,
            "status": self.status,
            "error": self.error,
            "error_detail": self.error_detail[:500],
            "chunk_times": list(self.chunk_times),
            "chunk_tokens": list(self.chunk_tokens),
            "token_source": self.token_source,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "prompt_tokens_target": self.prompt_tokens_target,
            "shared_prefix_tokens": self.shared_prefix_tokens,
            "turn": self.turn,
            "class": self.priority_class,
            "images": self.images,
            "adapter": self.adapter,
            "max_tokens": self.max_tokens,
            "warmup": self.warmup,
            "ttft": self.ttft,
            "tpot": self.tpot,
            "e2e": self.e2e,
            "server_timings": self.server_timings,
            "finish_reason": self.finish_reason,
            "connect_s": self.connect_s,
            "tls_s": self.tls_s,
            "cut_by_stop": self.cut_by_stop,
            "cold": self.cold,
            "reasoning_chunks": None if self.reasoning_chunks is None else list(self.reasoning_chunks),
            "reasoning_tokens": self.reasoning_tokens,
            "carried_tools": self.carried_tools,
            "structured": self.structured,
            "tool_call_chunks": None if self.tool_call_chunks is None else list(self.tool_call_chunks),
            "traceparent": self.traceparent,
            # Its trace id alone: what a tracing backend is searched by.
            "trace_id": None if self.traceparent is None else self.traceparent[3:35],
            "streamed": self.streamed,
            "cancelled": self.cancelled,
            "fate": self.fate or None,
            # The first bytes of a failed response (redacted of the API key by the lane), for the post-mortem.
            "first_bytes": self.partial_bytes[:2048].decode("utf-8", "replace") if self.error else "",
        }
