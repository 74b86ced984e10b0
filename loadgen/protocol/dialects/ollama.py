"""Ollama's native `POST /api/chat` and `POST /api/generate`: newline-delimited JSON, not SSE.

Request: `{"model", "messages" | "prompt" (+ "system"), "stream": true, "options": {"num_predict"}}`.
Stream: one JSON object per line, `{"message": {"role", "content", "thinking"?}, "done": false}` (chat) or
`{"response", "thinking"?, "done": false}` (generate); each non-empty line is one token (Ollama sends no per-chunk
count and drops chunks with nothing to show, e.g. while a multibyte character is incomplete). The last line has
`"done": true`, `done_reason`, `prompt_eval_count`, `eval_count` and durations in nanoseconds (`total_duration`,
`load_duration`, `prompt_eval_duration`, `eval_duration`), turned into `server_timings` with llama.cpp's key names
in milliseconds. `prompt_eval_count` counts only the prompt tokens evaluated (a cached prefix is left out, and the
field is omitted when zero); Ollama does not say how many were cached, so records get no `cached_prompt_tokens`.
Output length: `options.num_predict` is only a cap: Ollama has no `ignore_eos` nor a minimum, so a request may stop
early at EOS (the report says `max_only`).
Errors: HTTP status with `{"error": "..."}` before the stream starts, the same object
as a line inside it.
"""

from __future__ import annotations

from typing import Any

from loadgen.protocol.dialects._base import (
    Chunk,
    DialectBase,
    RequestLike,
    as_count,
    chat_messages,
    load_reply,
    merge_extra,
    normal_finish,
)

__all__ = ["OllamaChat", "OllamaGenerate"]

_NS_PER_MS = 1e6


def _server_timings(obj: dict[str, Any]) -> dict[str, Any] | None:
    out: dict[str, Any] = {}
    prompt_n, predicted_n = as_count(obj.get("prompt_eval_count")), as_count(obj.get("eval_count"))
    if prompt_n is not None:
        out["prompt_n"] = prompt_n
    if predicted_n is not None:
        out["predicted_n"] = predicted_n
    for src, dst in (
        ("prompt_eval_duration", "prompt_ms"),
        ("eval_duration", "predicted_ms"),
        ("total_duration", "total_ms"),
        ("load_duration", "load_ms"),
    ):
        ns = as_count(obj.get(src))
        if ns is not None:
            out[dst] = ns / _NS_PER_MS
    if predicted_n and "predicted_ms" in out:
        out["predicted_per_token_ms"] = out["predicted_ms"] / predicted_n
    if prompt_n and "prompt_ms" in out:
        out["prompt_per_token_ms"] = out["prompt_ms"] / prompt_n
    return out or None


class _OllamaBase(DialectBase):
    framing = "ndjson"
    accept = "application/x-ndjson"

    def parse(self, payload: bytes) -> Chunk:
        obj = load_reply(payload)
        if isinstance(obj, Chunk):
            return obj
        has_output = self._has_output(obj)
        if obj.get("done") is not True:
            return Chunk(False, has_output)
        usage: dict[str, Any] = {}
        pt, ct = as_count(obj.get("prompt_eval_count")), as_count(obj.get("eval_count"))
        if pt is not None:
            usage["prompt_tokens"] = pt
        if ct is not None:
            usage["completion_tokens"] = ct
        return Chunk(
            True, has_output, None, usage or None, None, normal_finish(obj.get("done_reason")), _server_timings(obj)
        )

    def _has_output(self, obj: dict[str, Any]) -> bool:
        raise NotImplementedError


class OllamaChat(_OllamaBase):
    chat_template = True
    name = "ollama-chat"
    path = "/api/chat"

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        body: dict[str, Any] = {
            "model": model,
            "messages": chat_messages(spec),
            "stream": True,
            "options": {"num_predict": spec.max_tokens},
        }
        return merge_extra(body, extra)

    def _has_output(self, obj: dict[str, Any]) -> bool:
        message = obj.get("message")
        if not isinstance(message, dict):
            return False
        return bool(message.get("content") or message.get("thinking") or message.get("tool_calls"))


class OllamaGenerate(_OllamaBase):
    name = "ollama-generate"
    path = "/api/generate"

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        body: dict[str, Any] = {
            "model": model,
            "prompt": spec.prompt,
            "stream": True,
            "options": {"num_predict": spec.max_tokens},
        }
        if spec.system_prompt:
            body["system"] = spec.system_prompt
        return merge_extra(body, extra)

    def _has_output(self, obj: dict[str, Any]) -> bool:
        return bool(obj.get("response") or obj.get("thinking") or obj.get("tool_calls"))
