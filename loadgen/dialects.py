"""Protocol dialects: how a request is framed for a server and how its stream chunks are read.

A dialect turns a `RequestSpec` into a path and a JSON body, and turns one decoded stream payload into a `Chunk`:
did it carry generated tokens, the server's cumulative token count if it sent one, final usage, or an error.
Only the dialect knows a server's JSON shape; timing stays in the stream reader.
"""

from __future__ import annotations

from typing import Any, Protocol

import orjson

from .registry import Registry

__all__ = ["Chunk", "Dialect", "DIALECT_NAMES", "dialect_registry", "get_dialect"]

DIALECT_NAMES: tuple[str, ...] = ("openai-chat", "openai-completions")


class Chunk:
    """What one stream payload told us. Built per chunk on the hot path, hence slots and positional init."""

    __slots__ = ("done", "has_output", "cum_tokens", "usage", "error", "finish_reason")

    def __init__(
        self,
        done: bool = False,
        has_output: bool = False,
        cum_tokens: int | None = None,
        usage: dict[str, Any] | None = None,
        error: str | None = None,
        finish_reason: str | None = None,
    ) -> None:
        self.done = done
        self.has_output = has_output
        self.cum_tokens = cum_tokens
        self.usage = usage
        self.error = error
        self.finish_reason = finish_reason


class RequestLike(Protocol):
    system_prompt: str
    prompt: str
    max_tokens: int


class Dialect(Protocol):
    name: str
    path: str
    framing: str  # "sse" or "ndjson"

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes: ...

    def parse(self, payload: bytes) -> Chunk: ...


_DONE = Chunk(done=True)


def _error_message(obj: dict[str, Any]) -> str | None:
    err = obj.get("error")
    if err is not None:
        if isinstance(err, dict):
            return str(err.get("message") or err.get("type") or err)
        return str(err)
    if obj.get("object") == "error":  # vLLM's ErrorResponse shape
        return str(obj.get("message", "error"))
    return None


def _usage_fields(obj: dict[str, Any]) -> tuple[int | None, dict[str, Any] | None]:
    usage = obj.get("usage")
    if not isinstance(usage, dict):
        return None, None
    ct = usage.get("completion_tokens")
    return (ct if isinstance(ct, int) else None), usage


class _OpenAIBase:
    name = ""
    path = ""
    framing = "sse"

    def _stream_options(self, continuous_usage: bool) -> dict[str, Any]:
        opts: dict[str, Any] = {"include_usage": True}
        if continuous_usage:
            opts["continuous_usage_stats"] = True
        return opts

    def parse(self, payload: bytes) -> Chunk:
        if payload == b"[DONE]":
            return _DONE
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return Chunk(error=f"malformed JSON in stream chunk: {payload[:120]!r}")
        if not isinstance(obj, dict):
            return Chunk(error=f"stream chunk is not a JSON object: {payload[:120]!r}")
        msg = _error_message(obj)
        if msg is not None:
            return Chunk(error=msg)
        cum, usage = _usage_fields(obj)
        choices = obj.get("choices")
        if not choices:
            # The final usage-only chunk: totals for the request, not tokens carried by this chunk.
            return Chunk(False, False, None, usage, None, None)
        choice = choices[0]
        if not isinstance(choice, dict):
            return Chunk(error=f"malformed choice in stream chunk: {payload[:120]!r}")
        return Chunk(False, self._choice_has_output(choice), cum, usage, None, choice.get("finish_reason"))

    def _choice_has_output(self, choice: dict[str, Any]) -> bool:
        raise NotImplementedError


class OpenAIChat(_OpenAIBase):
    name = "openai-chat"
    path = "/v1/chat/completions"

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        messages = []
        if spec.system_prompt:
            messages.append({"role": "system", "content": spec.system_prompt})
        messages.append({"role": "user", "content": spec.prompt})
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "max_tokens": spec.max_tokens,
            "stream": True,
            "stream_options": self._stream_options(continuous_usage),
        }
        if extra:
            body.update(extra)
        return orjson.dumps(body)

    def _choice_has_output(self, choice: dict[str, Any]) -> bool:
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return False
        # Reasoning models stream thoughts before content; both are generated tokens and count for TTFT.
        return bool(
            delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls")
        )


class OpenAICompletions(_OpenAIBase):
    name = "openai-completions"
    path = "/v1/completions"

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        prompt = f"{spec.system_prompt} {spec.prompt}" if spec.system_prompt else spec.prompt
        body: dict[str, Any] = {
            "model": model,
            "prompt": prompt,
            "max_tokens": spec.max_tokens,
            "stream": True,
            "stream_options": self._stream_options(continuous_usage),
        }
        if extra:
            body.update(extra)
        return orjson.dumps(body)

    def _choice_has_output(self, choice: dict[str, Any]) -> bool:
        return bool(choice.get("text"))


def dialect_registry() -> Registry[Dialect]:
    reg: Registry[Dialect] = Registry("dialect")
    for d in (OpenAIChat(), OpenAICompletions()):
        reg.register(d.name, d)
    assert tuple(reg.names()) == tuple(sorted(DIALECT_NAMES))
    return reg


def get_dialect(name: str) -> Dialect:
    return dialect_registry().get(name)
