"""What every dialect shares: the `Chunk` a payload becomes, the `Dialect` protocol, and small JSON helpers.

Parsing runs once per stream payload on the hot path, so the helpers are plain functions over orjson's dicts and a
payload that is not what a server should send becomes a `Chunk` with an error, never an exception.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import quote

import orjson

__all__ = [
    "Chunk",
    "Dialect",
    "DialectBase",
    "RequestLike",
    "as_count",
    "describe_error_body",
    "error_message",
    "exact_output",
    "load_object",
    "load_reply",
    "malformed",
    "malformed_json",
    "not_an_object",
    "merge_extra",
    "normal_finish",
]


class Chunk:
    """What one stream payload told us. Built per chunk on the hot path, hence slots and positional init.

    - `has_output`: the payload carried at least one generated token (content, reasoning, tool call, special token).
    - `cum_tokens`: the server's cumulative count of generated tokens, when it reports one per chunk; the tokens this
      chunk carried are the count's advance since the last chunk that moved it (so several tokens in one chunk, and a
      chunk held back for a multibyte character, are counted exactly).
    - `tokens`: the number of tokens this chunk carried, when the server reports a per-chunk (not cumulative) count.
    - `usage`: totals with the keys `prompt_tokens` / `completion_tokens` (other servers' names normalised to these).
    - `done`: this payload ends the stream; it may also carry tokens and usage, which are counted first.
    - `error`: an error message, classified `malformed` when `malformed` is set (the payload is not what the
      dialect's server sends: not JSON, not an object, a choice that is not one), else `server_error` (the server
      said something went wrong). A flag, not a prefix of the message: messages are for people and get reworded.
    - `finish_reason`: why the server ended the stream, in OpenAI's words where a dialect has its own ("stop" for
      end of sequence or a stop string, "length" for max_tokens; see `normal_finish`).
    - `server_timings`: the server's own timings in llama.cpp's key names and milliseconds (`prompt_n`, `prompt_ms`,
      `predicted_n`, `predicted_ms`, `predicted_per_token_ms`, ...), from llama.cpp's `timings` or Ollama's durations.
    - `reasoning`: its output was thinking only (`delta.reasoning_content` / `delta.reasoning`, no content, tool call
      or refusal): a reasoning model's tokens before its answer (measure/reasoning.py).
    - `tool_call`: its output was a tool call's (`delta.tool_calls`: the function's name or argument pieces, no
      content or refusal): time to the first tool call and argument tokens (measure/tool_calls.py).
    """

    __slots__ = (
        "done",
        "has_output",
        "cum_tokens",
        "usage",
        "error",
        "finish_reason",
        "server_timings",
        "tokens",
        "malformed",
        "reasoning",
        "tool_call",
    )

    def __init__(
        self,
        done: bool = False,
        has_output: bool = False,
        cum_tokens: int | None = None,
        usage: dict[str, Any] | None = None,
        error: str | None = None,
        finish_reason: str | None = None,
        server_timings: dict[str, Any] | None = None,
        tokens: int | None = None,
        malformed: bool = False,
        reasoning: bool = False,
        tool_call: bool = False,
    ) -> None:
        self.done = done
        self.has_output = has_output
        self.cum_tokens = cum_tokens
        self.usage = usage
        self.error = error
        self.finish_reason = finish_reason
        self.server_timings = server_timings
        self.tokens = tokens
        self.malformed = malformed
        self.reasoning = reasoning
        self.tool_call = tool_call

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__ if getattr(self, k) not in (None, False))
        return f"Chunk({fields})"


class RequestLike(Protocol):
    system_prompt: str
    prompt: str
    max_tokens: int


class Dialect(Protocol):
    name: str
    path: str  # may hold `{model}` (Triton); `path_for` fills it in
    framing: str  # "sse" or "ndjson"
    accept: str  # the Accept header the server expects
    # True when the stream has no end marker of its own: a complete HTTP body (chunked terminator, or the
    # Content-Length reached) is the orderly end. A body cut short is a transport error, reported by the connection.
    ends_at_eof: bool
    # The server family can be told to generate exactly max_tokens (ignore EOS): `build_body` does so when `extra`
    # holds `ignore_eos: true` (the variant's `exact_output` puts it there). False: max_tokens is only a cap.
    enforces_length: bool
    # The server family takes a request's scheduling priority as `priority` in the body (vLLM, SGLang): a priority
    # class's value goes there (in `extra`, built once per class). False: a class is marked by its headers only.
    priority_in_body: bool
    # The dialect can ask for a whole reply instead of a stream (a variant's `stream: false`: `dialect_for`).
    replies_whole: bool
    # This instance asks for a stream (True), or for one whole JSON reply (`parse_whole` reads it).
    stream: bool
    # The request can carry images (a mix's `images`): `chat_messages` sends them as OpenAI `image_url` parts.
    takes_images: bool
    # A request names its model in the body, so each may name another (a LoRA adapter: a variant's `adapters`).
    # False: one model per endpoint (TGI takes none; Triton's is in the path, built once per stream).
    model_per_request: bool
    # The server wraps the request's messages in its chat template: the prompt tokens it counts are the content's
    # plus the template's (the sampler's `template_overhead`, added to a record's `prompt_tokens_target`).
    chat_template: bool
    # The header the variant's API key (`api_key_env`) goes in, and what precedes the key in it.
    key_header: str
    key_scheme: str
    # Headers every request of the dialect carries (Anthropic's `anthropic-version`); a variant's own win.
    headers: dict[str, str]

    def path_for(self, model: str) -> str: ...

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes: ...

    def parse(self, payload: bytes) -> Chunk: ...

    def parse_whole(self, body: bytes) -> tuple[Chunk, str]:
        """A whole (non-streamed) reply: what it carried as one final `Chunk` (`cum_tokens`: its output tokens,
        from its usage), and its text."""
        ...


class DialectBase:
    """Defaults shared by the concrete dialects."""

    name = ""
    path = ""
    framing = "sse"
    accept = "text/event-stream"
    ends_at_eof = False
    enforces_length = False
    priority_in_body = False
    replies_whole = False
    stream = True
    takes_images = False
    model_per_request = True
    chat_template = False
    key_header = "Authorization"
    key_scheme = "Bearer "
    headers: dict[str, str] = {}

    def parse_whole(self, body: bytes) -> tuple[Chunk, str]:
        raise NotImplementedError(f"{self.name} requests are always streamed")

    def path_for(self, model: str) -> str:
        if "{model}" in self.path:
            # A Triton model name may carry a version: `ensemble/versions/2`.
            return self.path.format(model=quote(model, safe="/"))
        return self.path


def joined_prompt(spec: RequestLike) -> str:
    """System prompt and prompt as one text, for servers that take a raw prompt."""
    return f"{spec.system_prompt} {spec.prompt}" if spec.system_prompt else spec.prompt


def chat_messages(spec: RequestLike) -> list[dict[str, Any]]:
    """The system prompt (if any) and the prompt as chat messages, for servers that take a conversation; a
    replayed dataset row's own messages when it has them (``messages``, optional on a `RequestLike`). A request
    with images (``images``, data URLs) sends its prompt as content parts: the text, then an `image_url` per image."""
    replayed = getattr(spec, "messages", None)
    if replayed is not None:
        return list(replayed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": spec.system_prompt}] if spec.system_prompt else []
    images = getattr(spec, "images", None)
    if images:
        parts: list[dict[str, Any]] = [{"type": "text", "text": spec.prompt}]
        parts += [{"type": "image_url", "image_url": {"url": url}} for url in images]
        messages.append({"role": "user", "content": parts})
    else:
        messages.append({"role": "user", "content": spec.prompt})
    return messages


def exact_output(extra: dict[str, Any] | None) -> bool:
    """The variant asked for outputs of exactly max_tokens (`ignore_eos: true` in its extra body)."""
    return extra is not None and extra.get("ignore_eos") is True


def merge_extra(body: dict[str, Any], extra: dict[str, Any] | None) -> bytes:
    """`extra` merged into `body`, then serialised. Nested mappings merge (Ollama `options`, TGI `parameters`);
    any other value replaces the dialect's. `extra` itself is never modified."""
    if extra:
        _merge_into(body, extra)
    return orjson.dumps(body)


def _merge_into(base: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        current = base.get(key)
        if isinstance(value, dict) and isinstance(current, dict):
            merged = dict(current)
            _merge_into(merged, value)
            base[key] = merged
        else:
            base[key] = value


def malformed_json(payload: bytes) -> Chunk:
    return Chunk(error=f"malformed JSON in stream chunk: {payload[:120]!r}", malformed=True)


def not_an_object(payload: bytes) -> Chunk:
    return Chunk(error=f"malformed stream chunk (not a JSON object): {payload[:120]!r}", malformed=True)


def malformed(what: str, payload: bytes) -> Chunk:
    """A payload that is JSON but not of the dialect's shape (`what` says which part)."""
    return Chunk(error=f"malformed {what} in stream chunk: {payload[:120]!r}", malformed=True)


# Each server family's words for why it stopped, in OpenAI's: the report compares the share of requests cut at
# max_tokens across variants of different servers, so "length" must mean the same everywhere.
_FINISH_WORDS = {
    "eos_token": "stop",  # TGI
    "stop_sequence": "stop",  # TGI
    "eos": "stop",  # llama.cpp stop_type
    "word": "stop",  # llama.cpp stop_type: a stop string
    "limit": "length",  # llama.cpp stop_type: n_predict reached
    "stopped_limit": "length",
    "stopped_eos": "stop",
    "stopped_word": "stop",
    "max_tokens": "length",
}


def normal_finish(reason: object) -> str | None:
    """A finish reason in OpenAI's words ("stop", "length", ...); None when there is none ("none", not a string)."""
    if not isinstance(reason, str) or not reason or reason == "none":
        return None
    return _FINISH_WORDS.get(reason, reason)


def load_object(payload: bytes) -> dict[str, Any] | Chunk:
    """The payload as a JSON object, or an error `Chunk` saying why it is not one. Every stream chunk of the
    openai, anthropic-messages and openai-responses dialects goes through it (the type checked by identity: orjson
    makes plain dicts)."""
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return malformed_json(payload)
    if type(obj) is not dict:
        return not_an_object(payload)
    return obj


def load_reply(payload: bytes) -> dict[str, Any] | Chunk:
    """The payload as a JSON object, or a `Chunk` carrying why it is none or the error it reports."""
    obj = load_object(payload)
    if isinstance(obj, Chunk):
        return obj
    msg = error_message(obj)
    return obj if msg is None else Chunk(error=msg)


def as_count(value: Any) -> int | None:
    """A token count from JSON: a non-negative int, or a one-element list of one (Triton tensors); else None."""
    if isinstance(value, list) and len(value) == 1:
        value = value[0]
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def error_message(obj: dict[str, Any]) -> str | None:
    """The error an object reports, in any of the shapes servers use, or None.

    `{"error": {"message", "type"}}` (OpenAI, vLLM, llama.cpp), `{"error": "...", "error_type"}` (TGI),
    `{"error": "..."}` (Ollama, Triton), `{"object": "error", "message"}` (older vLLM, SGLang).
    """
    err = obj.get("error")
    if err is not None:
        if isinstance(err, dict):
            msg = err.get("message") or err.get("msg") or err.get("type") or err
            etype = err.get("type")
        else:
            msg, etype = err, obj.get("error_type")
        text = str(msg)
        return f"{etype}: {text}" if isinstance(etype, str) and etype and etype != text else text
    if obj.get("object") == "error":
        etype = obj.get("type")
        text = str(obj.get("message", "error"))
        return f"{etype}: {text}" if isinstance(etype, str) and etype else text
    return None


def describe_error_body(body: bytes, limit: int = 500) -> str:
    """The server's own error message from a non-200 response body (or an error event), truncated to `limit`.

    Falls back to FastAPI's `detail`, a bare `message`, and finally the body's text.
    """
    text: str | None = None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        text = error_message(obj)
        if text is None:
            detail = obj.get("detail")
            if isinstance(detail, str):
                text = detail
            elif isinstance(detail, list) and detail and isinstance(detail[0], dict):  # pydantic validation errors
                first = detail[0]
                loc = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
                text = f"{loc}: {first.get('msg', '')}" if loc else str(first.get("msg", detail))
            elif isinstance(obj.get("message"), str):
                text = obj["message"]
    if text is None:
        text = body.decode("utf-8", "replace").strip()
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text
