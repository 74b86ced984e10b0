"""Wire framings of the simulator's generation routes: the bytes each API puts on the wire.

| route (`POST`) | framing | stream | end of stream |
|---|---|---|---|
| `/v1/chat/completions`, `/v1/completions` | OpenAI, as vLLM | SSE, one event per engine step | `[DONE]` |
| `/generate_stream` | TGI | SSE (`data:` without a space), one event per token | the event with `generated_text` |
| `/generate` | TGI | none: one JSON body | |
| `/api/chat`, `/api/generate` | Ollama | NDJSON (`stream` defaults to true), one line per token | `done: true` |

A framing parses its route's request body and builds every byte of the response: the stream head, the events of an
engine step, the end of the stream, the non-streamed body, error bodies and the fault-injected variants of each
(a mid-stream error event, a truncated event). Timing, ground-truth records and fault decisions stay in
``loadgen.sim.server`` and are the same for every framing: everything an engine step produced for a request leaves
in one write, so a step of k tokens is one OpenAI event carrying k tokens, or k consecutive TGI events / Ollama lines
in that write (TGI and Ollama send one event per token); the truth log records each event with its token count.

Every request generates exactly its token budget (benchmark mode), so ``finish_reason`` / ``done_reason`` is always
``length``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "FRAMINGS",
    "ApiError",
    "Framing",
    "SimRequest",
    "StreamState",
    "token_text",
]

#: Tokens generated when an OpenAI request gives no ``max_tokens`` (vLLM's completions default).
DEFAULT_MAX_TOKENS = 16
#: TGI's default ``max_new_tokens`` (router >= 1.4).
TGI_DEFAULT_MAX_NEW_TOKENS = 100
#: Ollama's default ``num_predict`` is -1 (until EOS or the context is full), which a simulator without EOS cannot
#: do; it generates this many instead, the default of older Ollama releases.
OLLAMA_DEFAULT_NUM_PREDICT = 128

# One whitespace-free word per token, each with a leading space: a client that splits on whitespace counts tokens
# exactly, and the text is readable in a debug dump.
_VOCAB: tuple[str, ...] = (
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " with", " was", " on", " be",
    " by", " at", " this", " are", " from", " or", " an", " have", " not", " they", " which", " one", " you",
    " were", " all", " we", " her", " she", " there", " would", " their", " will", " when", " who", " him",
    " been", " has", " more", " if", " no", " out", " so", " said", " what", " up", " its", " about",
    " into", " than", " them", " can", " only", " other", " new", " some", " could", " time", " these",
    " two", " may", " then", " do", " first", " any",
)  # fmt: skip
# Token ids of the vocabulary words (TGI reports them): arbitrary, stable, clear of the special-token range.
_TOKEN_ID_BASE = 1000


def token_text(offset: int, start: int, n: int) -> str:
    """Text of tokens ``start`` .. ``start + n - 1`` of a request whose vocabulary offset is ``offset``."""
    vocab, off = _VOCAB, offset + start
    return "".join(vocab[(off + i) % len(vocab)] for i in range(n))


class ApiError(Exception):
    """A request the route refuses: ``status``, message and an OpenAI-style error type; the route's framing
    formats the body."""

    def __init__(self, status: int, message: str, type_: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type_


@dataclass(slots=True)
class SimRequest:
    """What the engine and the framing need from a parsed request body."""

    words: list[str]
    max_tokens: int
    stream: bool
    #: The ``model`` the client asked for; empty: the server fills in its variant name.
    model: str = ""
    #: OpenAI ``stream_options.include_usage``: a usage-only chunk before ``[DONE]``.
    include_usage: bool = False
    #: OpenAI ``stream_options.continuous_usage_stats``: cumulative usage in every chunk.
    continuous: bool = False
    #: TGI ``parameters.details``: ``details`` in the last event / the body.
    details: bool = False


class StreamState(Protocol):
    """The per-request state a framing reads (``loadgen.sim.server``'s stream object)."""

    rid: str
    req: SimRequest
    created: int
    arrival: float
    vocab_offset: int
    #: ``time.monotonic()`` of the engine step that produced the first token, None before it.
    first_step: float | None

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def cached_tokens(self) -> int: ...


#: One event of a stream: its bytes and the number of generated tokens it carries.
Event = tuple[bytes, int]


class Framing:
    """Base of the route framings; the defaults are those of SSE."""

    content_type = "text/event-stream"
    #: Send the response head as soon as the request is queued (else with the first token write, like Ollama).
    head_on_accept = True
    #: Status of a request that is well-formed JSON but invalid (too long for the KV cache, bad field types).
    invalid_status = 400
    #: A truncated event is cut right after this (what a crashed writer leaves behind); else in the middle.
    cut_marker = b""
    #: What ends one event on the wire.
    delimiter = b"\n\n"

    def parse(self, body: dict[str, Any]) -> SimRequest:
        raise NotImplementedError

    def error_body(self, status: int, message: str, type_: str) -> bytes:
        return orjson.dumps({"error": {"message": message, "type": type_, "param": None, "code": status}})

    def head(self, s: StreamState) -> bytes:
        """Body bytes sent with the stream's head, before any token."""
        return b""

    def tokens(self, s: StreamState, start: int, n: int, final: bool) -> list[Event]:
        """The events of one engine step that produced tokens ``start`` .. ``start + n - 1``; ``final``: the
        request's last step (not cut short by a fault)."""
        raise NotImplementedError

    def end(self, s: StreamState, generated: int) -> bytes:
        """Bytes after the final step's events (usage, ``[DONE]``, a closing line)."""
        return b""

    def error_event(self) -> bytes:
        """A mid-stream error report, in the route's own shape."""
        raise NotImplementedError

    def truncated(self, event: bytes) -> bytes:
        """``event`` cut short, still delimited like a whole event, so a client parses it and finds bad JSON."""
        cut = event.find(self.cut_marker) if self.cut_marker else -1
        body = event[: cut + len(self.cut_marker)] if cut >= 0 else event[: len(event) // 2]
        return body.rstrip(b"\n") + self.delimiter

    def full(self, s: StreamState, generated: int) -> bytes:
        """The non-streamed response body."""
        raise NotImplementedError


# ---- helpers shared by the parsers ----


def _object(body: dict[str, Any], key: str, status: int) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ApiError(status, f"'{key}' must be an object")
    return value


def _bool(body: dict[str, Any], key: str, default: bool, status: int) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise ApiError(status, f"'{key}' must be a boolean")
    return value


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _model(body: dict[str, Any], status: int) -> str:
    model = body.get("model") or ""
    if not isinstance(model, str):
        raise ApiError(status, "'model' must be a string")
    return model


# ---- OpenAI ----


def _content_words(content: Any) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return content.split()
    if isinstance(content, list):  # OpenAI content parts: only text parts are billed
        words: list[str] = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                words.extend(part["text"].split())
        return words
    raise ApiError(400, "message content must be a string, a list of content parts or null")


def _message_words(messages: Any, status: int, content_types: str = "any") -> list[str]:
    if not isinstance(messages, list) or not messages:
        raise ApiError(status, "'messages' is required and must be a non-empty list")
    words: list[str] = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(status, "each message must be an object with a string 'role'")
        content = m.get("content")
        if content_types == "str" and not isinstance(content, str | None):
            raise ApiError(status, "message content must be a string")
        words.extend(_content_words(content))
    return words


class _OpenAI(Framing):
    chat = False
    cut_marker = b'"choices":['

    def parse(self, body: dict[str, Any]) -> SimRequest:
        words = self._prompt_words(body)
        value = body.get("max_completion_tokens", body.get("max_tokens"))
        if value is None:
            max_tokens = DEFAULT_MAX_TOKENS
        elif not _int(value) or value < 1:
            raise ApiError(400, "'max_tokens' must be a positive integer")
        else:
            max_tokens = value
        if body.get("n", 1) != 1:
            raise ApiError(400, "the simulator supports n=1 only")
        stream = _bool(body, "stream", False, 400)
        opts = _object(body, "stream_options", 400)
        return SimRequest(
            words,
            max_tokens,
            stream,
            _model(body, 400),
            include_usage=bool(opts.get("include_usage")),
            # vLLM only honours continuous_usage_stats together with include_usage; accepting it alone is lenient.
            continuous=bool(opts.get("continuous_usage_stats")),
        )

    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def _id(self, s: StreamState) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + s.rid

    def _chunk(self, s: StreamState, choices: list[dict[str, Any]], completion_tokens: int | None) -> bytes:
        obj: dict[str, Any] = {
            "id": self._id(s),
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": s.created,
            "model": s.req.model,
            "choices": choices,
        }
        if completion_tokens is not None:
            obj["usage"] = _usage(s, completion_tokens)
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def _choice(self, text: str, finish: str | None) -> dict[str, Any]:
        if self.chat:
            return {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}

    def head(self, s: StreamState) -> bytes:
        # vLLM's chat stream opens with a role-only chunk as soon as the request is accepted; completions has none.
        if not self.chat:
            return b""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        return self._chunk(s, [choice], 0 if s.req.continuous else None)

    def tokens(self, s: StreamState, start: int, n: int, final: bool) -> list[Event]:
        choice = self._choice(token_text(s.vocab_offset, start, n), "length" if final else None)
        return [(self._chunk(s, [choice], start + n if s.req.continuous else None), n)]

    def end(self, s: StreamState, generated: int) -> bytes:
        usage = self._chunk(s, [], generated) if s.req.include_usage else b""
        return usage + b"data: [DONE]\n\n"

    def error_event(self) -> bytes:
        return (
            b'data: {"error": {"message": "simulated mid-stream failure (loadgen sim fault injection)", '
            b'"type": "server_error", "code": 500}}\n\ndata: [DONE]\n\n'
        )

    def full(self, s: StreamState, generated: int) -> bytes:
        text = token_text(s.vocab_offset, 0, generated)
        choice: dict[str, Any]
        if self.chat:
            message = {"role": "assistant", "content": text}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "length"}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None}
        obj = {
            "id": self._id(s),
            "object": "chat.completion" if self.chat else "text_completion",
            "created": s.created,
            "model": s.req.model,
            "choices": [choice],
            "usage": _usage(s, generated),
        }
        return orjson.dumps(obj)


def _usage(s: StreamState, completion_tokens: int) -> dict[str, int]:
    p = s.prompt_tokens
    return {"prompt_tokens": p, "completion_tokens": completion_tokens, "total_tokens": p + completion_tokens}


class OpenAIChat(_OpenAI):
    chat = True

    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        return _message_words(body.get("messages"), 400)


class OpenAICompletions(_OpenAI):
    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            return prompt.split()
        if isinstance(prompt, list) and all(_int(t) for t in prompt):
            return [str(t) for t in prompt]  # token ids: one word per id
        raise ApiError(400, "'prompt' is required: a string, a list of token ids, or a list with one of those")


# ---- TGI ----

# TGI's `error_type` for the statuses the simulator answers with.
_TGI_ERROR_TYPES = {400: "validation", 422: "validation", 429: "overloaded", 503: "overloaded"}


class TGIGenerate(Framing):
    """``/generate_stream`` (``stream=True``) or ``/generate``: `{"inputs", "parameters": {"max_new_tokens",
    "details"}}`. TGI's router sends ``details`` only when asked for, and ``input_length`` in them (TGI >= 2.0)."""

    invalid_status = 422
    cut_marker = b'"token":{'

    def __init__(self, stream: bool) -> None:
        self.stream = stream

    def parse(self, body: dict[str, Any]) -> SimRequest:
        inputs = body.get("inputs")
        if not isinstance(inputs, str):
            raise ApiError(422, "Input validation error: `inputs` is required and must be a string", "validation")
        params = _object(body, "parameters", 422)
        value = params.get("max_new_tokens")
        if value is None:
            max_tokens = TGI_DEFAULT_MAX_NEW_TOKENS
        elif not _int(value) or value < 1:
            raise ApiError(422, "Input validation error: `max_new_tokens` must be strictly positive", "validation")
        else:
            max_tokens = value
        details = _bool(params, "details", False, 422)
        return SimRequest(inputs.split(), max_tokens, self.stream, details=details)

    def error_body(self, status: int, message: str, type_: str) -> bytes:
        return orjson.dumps({"error": message, "error_type": _TGI_ERROR_TYPES.get(status, "generation")})

    def _token(self, s: StreamState, i: int) -> dict[str, Any]:
        idx = (s.vocab_offset + i) % len(_VOCAB)
        return {"id": _TOKEN_ID_BASE + idx, "text": _VOCAB[idx], "logprob": -0.25, "special": False}

    def _details(self, s: StreamState, generated: int) -> dict[str, Any]:
        return {
            "finish_reason": "length",
            "generated_tokens": generated,
            "seed": None,
            "input_length": s.prompt_tokens,
        }

    def tokens(self, s: StreamState, start: int, n: int, final: bool) -> list[Event]:
        out: list[Event] = []
        dumps = orjson.dumps
        for i in range(start, start + n):
            obj: dict[str, Any] = {"index": i + 1, "token": self._token(s, i), "generated_text": None, "details": None}
            if final and i == start + n - 1:
                obj["generated_text"] = token_text(s.vocab_offset, 0, i + 1)
                if s.req.details:
                    obj["details"] = self._details(s, i + 1)
            out.append((b"data:" + dumps(obj) + b"\n\n", 1))
        return out

    def error_event(self) -> bytes:
        return (
            b'data:{"error":"Request failed during generation: simulated mid-stream failure '
            b'(loadgen sim fault injection)","error_type":"generation"}\n\n'
        )

    def full(self, s: StreamState, generated: int) -> bytes:
        obj: dict[str, Any] = {"generated_text": token_text(s.vocab_offset, 0, generated)}
        if s.req.details:
            details = self._details(s, generated)
            del details["input_length"]
            details["prefill"] = []
            details["tokens"] = [self._token(s, i) for i in range(generated)]
            obj["details"] = details
        return orjson.dumps(obj)


# ---- Ollama ----


def _created_at() -> str:
    """Now as Go's RFC 3339 with nanoseconds, in UTC (Ollama's ``created_at``)."""
    ns = time.time_ns()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000)) + f".{ns % 1_000_000_000:09d}Z"


class _Ollama(Framing):
    """``/api/chat`` and ``/api/generate``: ``stream`` defaults to true, ``options.num_predict`` is the budget.

    The final line's durations are the simulator's own: ``prompt_eval_duration`` from arrival to the first token's
    engine step (queueing included), ``eval_duration`` from there to the last step, ``total_duration`` arrival to
    the last step, ``load_duration`` 0 (the model is always loaded). ``prompt_eval_count`` leaves out prompt tokens
    served from the prefix cache and is omitted when zero, as Ollama does.
    """

    content_type = "application/x-ndjson"
    # Ollama (gin) writes the head together with the first line.
    head_on_accept = False
    delimiter = b"\n"

    def parse(self, body: dict[str, Any]) -> SimRequest:
        model = _model(body, 400)
        if not model:
            raise ApiError(400, "model is required")
        words = self._prompt_words(body)
        options = _object(body, "options", 400)
        value = options.get("num_predict")
        if value is None or (_int(value) and value < 1):  # -1 / -2: until EOS / context full
            max_tokens = OLLAMA_DEFAULT_NUM_PREDICT
        elif not _int(value):
            raise ApiError(400, 'option "num_predict" must be of type integer')
        else:
            max_tokens = value
        return SimRequest(words, max_tokens, _bool(body, "stream", True, 400), model)

    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def error_body(self, status: int, message: str, type_: str) -> bytes:
        return orjson.dumps({"error": message})

    def _line(self, s: StreamState, created_at: str, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def tokens(self, s: StreamState, start: int, n: int, final: bool) -> list[Event]:
        created_at = _created_at()
        dumps = orjson.dumps
        off = s.vocab_offset
        return [
            (dumps(self._line(s, created_at, _VOCAB[(off + i) % len(_VOCAB)])) + b"\n", 1)
            for i in range(start, start + n)
        ]

    def _final(self, s: StreamState, text: str, generated: int) -> bytes:
        obj = self._line(s, _created_at(), text)
        obj["done_reason"] = "length"
        obj["done"] = True
        now = time.monotonic()
        first = s.first_step if s.first_step is not None else now
        obj["total_duration"] = int((now - s.arrival) * 1e9)
        obj["load_duration"] = 0
        evaluated = s.prompt_tokens - s.cached_tokens
        if evaluated > 0:
            obj["prompt_eval_count"] = evaluated
        obj["prompt_eval_duration"] = int((first - s.arrival) * 1e9)
        obj["eval_count"] = generated
        obj["eval_duration"] = int((now - first) * 1e9)
        return orjson.dumps(obj)

    def end(self, s: StreamState, generated: int) -> bytes:
        return self._final(s, "", generated) + b"\n"

    def error_event(self) -> bytes:
        return (
            b'{"error":"an error was encountered while running the model: simulated mid-stream failure '
            b'(loadgen sim fault injection)"}\n'
        )

    def full(self, s: StreamState, generated: int) -> bytes:
        return self._final(s, token_text(s.vocab_offset, 0, generated), generated)


class OllamaChat(_Ollama):
    cut_marker = b'"message":{'

    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        return _message_words(body.get("messages"), 400, content_types="str")

    def _line(self, s: StreamState, created_at: str, text: str) -> dict[str, Any]:
        return {
            "model": s.req.model,
            "created_at": created_at,
            "message": {"role": "assistant", "content": text},
            "done": False,
        }


class OllamaGenerate(_Ollama):
    cut_marker = b'"response":'

    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        words: list[str] = []
        for key in ("system", "prompt"):
            value = body.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise ApiError(400, f"'{key}' must be a string")
            words.extend(value.split())
        return words

    def _line(self, s: StreamState, created_at: str, text: str) -> dict[str, Any]:
        return {"model": s.req.model, "created_at": created_at, "response": text, "done": False}


#: The generation routes of every simulated variant, by path.
FRAMINGS: dict[str, Framing] = {
    "/v1/chat/completions": OpenAIChat(),
    "/v1/completions": OpenAICompletions(),
    "/generate_stream": TGIGenerate(stream=True),
    "/generate": TGIGenerate(stream=False),
    "/api/chat": OllamaChat(),
    "/api/generate": OllamaGenerate(),
}
