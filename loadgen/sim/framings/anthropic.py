"""Anthropic's Messages API (`POST /v1/messages`), as Anthropic streams it: named SSE events, one content block after
another, one `content_block_delta` per token (as llama.cpp's server sends them; a step of k tokens is k deltas in
its one write).

Request: `model`, `max_tokens` (required, as the API requires it), `messages` (user and assistant; a `system` role is
refused, as the API refuses it: the system prompt is the top-level `system`, a string or text blocks), `stream`,
`temperature` (0: greedy, as on the OpenAI routes), `tools` (`{name, description, input_schema}`) with `tool_choice`
(`{type: auto | any | tool | none}`), answered as framings/tools.py answers OpenAI's. The key (`x-api-key`) and
`anthropic-version` are accepted and not checked, as a local server does.

Stream: `message_start` (usage: `input_tokens` — the prompt tokens the prefix cache did not serve —,
`cache_read_input_tokens`, `cache_creation_input_tokens`) and a `ping` with the first token; a thinking block (the
profile's reasoning tokens, `thinking_delta`) closed by its `signature_delta`, then a text block (`text_delta`) or a
`tool_use` block (its id and name, then `input_json_delta` pieces of `{"answer": "…"}`); at the end
`content_block_stop`, `message_delta` (stop_reason `max_tokens`, or `tool_use`; the cumulative `output_tokens`) and
`message_stop`. Errors: `{"type": "error", "error": {"type", "message"}}`, as a body with the status or as an `error`
event mid-stream.
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.sim.framings.base import (
    ApiError,
    Event,
    Framing,
    SimRequest,
    StreamState,
    _bool,
    _int,
    _model,
    token_text,
)
from loadgen.sim.framings.tools import tool_request

__all__ = ["AnthropicMessages"]

# The API's error types by status (its errors page); 503 is the simulator's overload, Anthropic's 529.
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
_JSON_HEAD, _JSON_TAIL = '{"answer": "', '"}'
_PING = b'event: ping\ndata: {"type":"ping"}\n\n'  # after the first block opens, as Anthropic sends it


def _event(name: bytes, obj: dict[str, Any]) -> bytes:
    return b"event: " + name + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def _block_start(index: int, block: dict[str, Any]) -> bytes:
    return _event(b"content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def _block_stop(index: int) -> bytes:
    return _event(b"content_block_stop", {"type": "content_block_stop", "index": index})


def _text_words(value: Any, what: str) -> list[str]:
    """Words of a string or of a list of text blocks (`system`, a tool_result's content)."""
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list):
        words: list[str] = []
        for block in value:
            if not isinstance(block, dict) or not isinstance(block.get("text"), str):
                raise ApiError(400, f"{what}: each block must be a text block")
            words += block["text"].split()
        return words
    raise ApiError(400, f"{what}: expected a string or a list of text blocks")


def _block_words(block: Any, made: set[str], answered: list[str]) -> list[str]:
    """Words a content block bills as prompt; a tool_use's id goes into `made`, a tool_result's into `answered`."""
    kind = block.get("type") if isinstance(block, dict) else None
    if kind == "text" and isinstance(block.get("text"), str):
        return block["text"].split()
    if kind == "tool_use" and isinstance(block.get("id"), str) and isinstance(block.get("input"), dict):
        made.add(block["id"])
        return orjson.dumps(block["input"]).decode().split()
    if kind == "tool_result" and isinstance(block.get("tool_use_id"), str):
        answered.append(block["tool_use_id"])
        return _text_words(block.get("content", ""), "tool_result.content")
    if kind == "image" and isinstance(block.get("source"), dict):
        from loadgen.sim.image_tokens import image_words  # Pillow: only when an image arrives

        source = block["source"]
        url = source.get("url") if source.get("type") == "url" else None
        if source.get("type") == "base64":
            url = f"data:{source.get('media_type', 'image/jpeg')};base64,{source.get('data', '')}"
        try:
            return list(image_words({"url": url}))
        except ValueError as e:
            raise ApiError(400, str(e)) from None
    if kind in ("thinking", "redacted_thinking"):
        return []
    raise ApiError(400, f"unsupported content block: {str(block)[:80]}")


def _messages(body: dict[str, Any]) -> tuple[list[str], str]:
    """The prompt's words (system first) and the id of the tool call the last message answers ("": none)."""
    words = _text_words(body["system"], "system") if body.get("system") is not None else []
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "messages: Field required (a non-empty list)")
    made: set[str] = set()
    answered: list[str] = []
    for m in messages:
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("user", "assistant"):
            raise ApiError(
                400,
                f'messages: Unexpected role "{role}". The Messages API accepts a top-level `system` parameter, '
                'not "system" as an input message role.',
            )
        content = m.get("content")
        answered = []
        if isinstance(content, str):
            words += content.split()
        elif isinstance(content, list):
            for block in content:
                words += _block_words(block, made, answered)
        else:
            raise ApiError(400, "messages: content must be a string or a list of content blocks")
        for use_id in answered:
            if use_id not in made:
                raise ApiError(400, f"tool_result answers no tool_use made before it: {use_id!r}")
    return words, answered[-1] if messages[-1]["role"] == "user" and answered else ""


def _openai_tools(body: dict[str, Any]) -> dict[str, Any]:
    """`tools` and `tool_choice` in the OpenAI shapes framings/tools.py reads."""
    tools = body.get("tools")
    out: dict[str, Any] = {}
    if tools is not None:
        if not isinstance(tools, list):
            raise ApiError(400, "tools: expected a list of {name, input_schema}")
        out["tools"] = []
        for tool in tools:
            if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
                raise ApiError(400, "tools: each tool needs a name and an input_schema")
            fn = {"name": tool["name"], "parameters": tool.get("input_schema", {})}
            out["tools"].append({"type": "function", "function": fn})
    choice = body.get("tool_choice")
    if choice is not None:
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind in ("auto", "none"):
            out["tool_choice"] = kind
        elif kind == "any":
            out["tool_choice"] = "required"
        elif kind == "tool":
            out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
        else:
            raise ApiError(400, "tool_choice: expected {type: auto | any | tool | none}")
    return out


class AnthropicMessages(Framing):
    cut_marker = b'"delta":{'
    reasoning = True

    def parse(self, body: dict[str, Any]) -> SimRequest:
        value = body.get("max_tokens")
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ApiError(400, "max_tokens: Field required (a positive integer)")
        words, tool_result = _messages(body)
        temperature = body.get("temperature")
        req = SimRequest(
            words,
            value,
            _bool(body, "stream", False, 400),
            _model(body, 400),
            greedy=(_int(temperature) or isinstance(temperature, float)) and temperature == 0,
        )
        req.tool_call, arguments, _ = tool_request(_openai_tools(body), words)
        req.tool_result = tool_result
        if req.tool_call:  # the call's input is as long as its schema asks
            req.max_tokens = min(req.max_tokens, arguments)
        return req

    def error_body(self, status: int, message: str, type_: str) -> bytes:
        return orjson.dumps(
            {"type": "error", "error": {"type": _ERROR_TYPES.get(status, "api_error"), "message": message}}
        )

    def _usage(self, s: StreamState, output: int) -> dict[str, Any]:
        cached = s.cached_tokens
        return {
            "input_tokens": s.prompt_tokens - cached,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": cached,
            "output_tokens": output,
        }

    def _answer_block(self, s: StreamState) -> dict[str, Any]:
        if s.req.tool_call:
            return {"type": "tool_use", "id": "toolu_" + s.rid, "name": s.req.tool_call, "input": {}}
        return {"type": "text", "text": ""}

    def _opening(self, s: StreamState) -> bytes:
        """What precedes the first token: `message_start`, and the thinking block's start with a `ping`."""
        message: dict[str, Any] = {
            "id": "msg_" + s.rid,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": s.req.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(s, 1),
        }
        out = _event(b"message_start", {"type": "message_start", "message": message})
        if s.reasoning_tokens:
            out += _block_start(0, {"type": "thinking", "thinking": ""}) + _PING
        return out

    def _answer_opens(self, s: StreamState, first: bool) -> bytes:
        """The thinking block closed (its signature first), the answer's block opened (a `ping` after the first)."""
        out = b""
        if s.reasoning_tokens:
            sig = {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": ""}}
            out += _event(b"content_block_delta", sig) + _block_stop(0)
        out += _block_start(1 if s.reasoning_tokens else 0, self._answer_block(s))
        return out + (_PING if first else b"")

    def tokens(self, s: StreamState, start: int, n: int, final: bool) -> list[Event]:
        thinking = s.reasoning_tokens
        head = self._opening(s) if start == 0 else b""
        events: list[Event] = []
        last = start + n - 1
        for i in range(start, start + n):
            piece = token_text(s.vocab_offset, i, 1, s.perturbed)
            index = 0
            if i < thinking:
                delta: dict[str, Any] = {"type": "thinking_delta", "thinking": piece}
            else:
                if i == thinking:
                    head += self._answer_opens(s, i == 0)
                index = 1 if thinking else 0
                if s.req.tool_call:  # pieces of the input `{"answer": "<the tokens>"}`
                    piece = (_JSON_HEAD if i == thinking else "") + piece + (_JSON_TAIL if final and i == last else "")
                    delta = {"type": "input_json_delta", "partial_json": piece}
                else:
                    delta = {"type": "text_delta", "text": piece}
            body = {"type": "content_block_delta", "index": index, "delta": delta}
            events.append((head + _event(b"content_block_delta", body), 1))
            head = b""
        return events

    def end(self, s: StreamState, generated: int) -> bytes:
        last = 1 if s.reasoning_tokens and generated > s.reasoning_tokens else 0
        reason = "tool_use" if s.req.tool_call else "max_tokens"
        delta = {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None}}
        delta["usage"] = {"output_tokens": generated}
        return _block_stop(last) + _event(b"message_delta", delta) + _event(b"message_stop", {"type": "message_stop"})

    def error_event(self) -> bytes:
        error = {"type": "overloaded_error", "message": "simulated mid-stream failure (loadgen sim fault injection)"}
        return _event(b"error", {"type": "error", "error": error})

    def full(self, s: StreamState, generated: int) -> bytes:
        thinking = min(s.reasoning_tokens, generated)
        text = token_text(s.vocab_offset, thinking, generated - thinking, s.perturbed)
        content: list[dict[str, Any]] = []
        if thinking:
            content.append({"type": "thinking", "thinking": token_text(s.vocab_offset, 0, thinking), "signature": ""})
        if s.req.tool_call:
            block = self._answer_block(s)
            block["input"] = {"answer": text}
            content.append(block)
        else:
            content.append({"type": "text", "text": text})
        obj = {
            "id": "msg_" + s.rid,
            "type": "message",
            "role": "assistant",
            "content": content,
            "model": s.req.model,
            "stop_reason": "tool_use" if s.req.tool_call else "max_tokens",
            "stop_sequence": None,
            "usage": self._usage(s, generated),
        }
        return orjson.dumps(obj)
