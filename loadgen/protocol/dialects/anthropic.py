"""Anthropic's Messages API (`POST /v1/messages`), as Anthropic serves it and as llama.cpp's server does.

Request: `{"model", "max_tokens", "messages", "stream": true}`, the system prompt in the top-level `system` (the API
has no system role), the key in `x-api-key` (the variant's `api_key_env`; `key_header`) and `anthropic-version:
2023-06-01` (`headers`; a variant's own `headers` may name another version). A replayed conversation or a session's
history is in OpenAI's shapes (traffic/sessions.py): `anthropic_messages` turns it into Anthropic's, an assistant's
tool call into a `tool_use` block and a tool's result (`role: tool`) into a user message's `tool_result` block,
consecutive messages of one role merged (the API wants user and assistant in turn). A mix's tools
(config/tools.py) come in OpenAI's shape in the extra body and are sent in Anthropic's (`input_schema`; tool_choice
`auto` / `any` / `{type: tool, name}`); a response_format has no counterpart here and is refused at load.

Stream (SSE, each event named by an `event:` line and by the `type` of its data):
- `message_start`: `message.usage` with `input_tokens` — the prompt tokens *not* read from the cache —,
  `cache_read_input_tokens` and `cache_creation_input_tokens`: the record's prompt tokens are their sum (the whole
  prompt, as OpenAI's `prompt_tokens`) and its cached prompt tokens the cache reads;
- `content_block_start` / `content_block_stop` of a `text`, `thinking` or `tool_use` block (the tool's id and name);
- `content_block_delta`: the token chunks — `text_delta` (the answer), `thinking_delta` (reasoning, as OpenAI's
  `reasoning_content`), `input_json_delta` (a tool call's input, as OpenAI's tool-call argument pieces); a
  `signature_delta` or `citations_delta` carries no generated token;
- `message_delta`: `delta.stop_reason` (end_turn / stop_sequence → "stop", max_tokens → "length", tool_use →
  "tool_calls") and the cumulative `usage.output_tokens`, the server's count of output tokens;
- `message_stop`: the end of the stream; `ping`: keep-alive; `error`: `{"type": "error", "error": {"type",
  "message"}}`, a failed request (`server_error`, the error's type in its detail). A type this module does not know
  is skipped, as the API's versioning policy asks of clients.

No per-chunk token counts: each token chunk is one token and `message_delta`'s total, when it disagrees, is spread
over them at the end (accumulator `_spread_usage`); llama.cpp sends one delta per token. Output length: the API has
no ignore_eos, and llama.cpp's `/v1/messages` builds its own request from the Anthropic fields and drops any other,
so max_tokens is a cap only (`output_length: max_only`). Errors before the stream: `{"type": "error", "error":
{...}}` with the status (429 rate_limit_error, 529 overloaded_error, ...), read by `describe_error_body`.
"""

from __future__ import annotations

from typing import Any, cast

import orjson

from loadgen.protocol.dialects._base import (
    Chunk,
    DialectBase,
    RequestLike,
    chat_messages,
    error_message,
    load_object,
    malformed,
    merge_extra,
)

__all__ = ["ANTHROPIC_VERSION", "AnthropicMessages", "anthropic_messages", "anthropic_tools"]

ANTHROPIC_VERSION = "2023-06-01"

_NOTHING = Chunk()
_DONE = Chunk(done=True)
_ANSWER = Chunk(False, True)
_THINKING = Chunk(False, True, reasoning=True)
_TOOL_PIECE = Chunk(False, True, tool_call=True)
# A tool_use block opens: no generated token, but its id and name (a session sends the call back).
_TOOL_OPENS = Chunk(tool_call=True)
_STOP_WORDS = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}
# Which field of a content_block_delta's `delta` holds its generated text, and what the chunk is.
_DELTAS = {"text_delta": ("text", _ANSWER), "thinking_delta": ("thinking", _THINKING)}
_DELTAS["input_json_delta"] = ("partial_json", _TOOL_PIECE)


def _count(v: Any) -> int | None:
    return v if type(v) is int and v >= 0 else None


def _prompt_usage(usage: Any) -> dict[str, Any] | None:
    """Anthropic's input counts as the accumulator's: the whole prompt, and the part read from the cache."""
    if type(usage) is not dict:
        return None
    parts = [_count(usage.get(k)) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")]
    if parts[0] is None:
        return None
    out: dict[str, Any] = {"prompt_tokens": sum(p or 0 for p in parts)}
    if parts[1] is not None:
        out["prompt_tokens_details"] = {"cached_tokens": parts[1]}
    return out


class AnthropicMessages(DialectBase):
    name = "anthropic-messages"
    path = "/v1/messages"
    chat_template = True
    takes_images = True  # OpenAI `image_url` parts sent as `image` blocks (`anthropic_messages`)
    key_header = "x-api-key"
    key_scheme = ""
    headers = {"anthropic-version": ANTHROPIC_VERSION}

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        # `continuous_usage` has no counterpart: the API streams no per-chunk counts.
        system, messages = anthropic_messages(chat_messages(spec))
        body: dict[str, Any] = {"model": model, "max_tokens": spec.max_tokens, "messages": messages, "stream": True}
        if system:
            body["system"] = system
        if extra and ("tools" in extra or "tool_choice" in extra):
            extra = anthropic_tools(extra)
        return merge_extra(body, extra)

    def parse(self, payload: bytes) -> Chunk:
        obj = load_object(payload)
        if type(obj) is not dict:  # (a Chunk: why the payload is no JSON object)
            return cast(Chunk, obj)
        kind = obj.get("type")
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if type(delta) is not dict:
                return malformed("content_block_delta (no delta object)", payload)
            dtype = delta.get("type")
            found = _DELTAS.get(dtype) if type(dtype) is str else None
            if found is None:  # signature_delta, citations_delta, or one this module does not know
                return _NOTHING
            text = delta.get(found[0])
            return found[1] if type(text) is str and text else _NOTHING
        if kind == "message_delta":
            delta = obj.get("delta")
            reason = delta.get("stop_reason") if type(delta) is dict else None
            finish = _STOP_WORDS.get(reason, reason) if type(reason) is str and reason else None
            usage = obj.get("usage")
            totals: dict[str, Any] | None = None
            if type(usage) is dict:
                totals = _prompt_usage(usage) or {}  # newer servers repeat the input counts here
                out = _count(usage.get("output_tokens"))
                if out is not None:
                    totals["completion_tokens"] = out
            return Chunk(False, False, None, totals or None, None, finish)
        if kind == "message_stop":
            return _DONE
        if kind == "message_start":
            message = obj.get("message")
            if type(message) is not dict:
                return malformed("message_start (no message object)", payload)
            return Chunk(usage=_prompt_usage(message.get("usage")))
        if kind == "content_block_start":
            block = obj.get("content_block")
            if type(block) is not dict:
                return malformed("content_block_start (no content_block object)", payload)
            btype = block.get("type")
            if btype == "tool_use":
                return _TOOL_OPENS
            # A block opens empty; one that opened with text already would carry it.
            found = _DELTAS.get("text_delta" if btype == "text" else "thinking_delta" if btype == "thinking" else "")
            if found is not None:
                text = block.get(found[0])
                return found[1] if type(text) is str and text else _NOTHING
            return _NOTHING
        if kind == "error" or "error" in obj:
            return Chunk(error=error_message(obj) or f"error event: {payload[:200]!r}")
        if type(kind) is not str:
            return malformed("event (no type)", payload)
        return _NOTHING  # ping, content_block_stop, or a type added after this module


def _text_of(content: Any) -> str:
    """A content's text (a string, or OpenAI content parts' texts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _blocks_of(content: Any) -> list[dict[str, Any]]:
    """A content (a string, or OpenAI content parts: text, `image_url`) as Anthropic content blocks; an image's
    data URL becomes a base64 source, any other URL a url source."""
    if not isinstance(content, list):
        text = _text_of(content)
        return [{"type": "text", "text": text}] if text else []
    blocks: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        if isinstance(part.get("text"), str):
            blocks.append({"type": "text", "text": part["text"]})
        elif part.get("type") == "image_url":
            image = part.get("image_url")
            url = str(image.get("url", "")) if isinstance(image, dict) else ""
            head, sep, data = url.partition(",")
            if url.startswith("data:") and head.endswith(";base64") and sep:
                source = {"type": "base64", "media_type": head[5 : -len(";base64")], "data": data}
            else:
                source = {"type": "url", "url": url}
            blocks.append({"type": "image", "source": source})
    return blocks


def _call_input(arguments: Any) -> dict[str, Any]:
    """A tool call's streamed arguments as the `input` object a tool_use block holds (`{}` when they are no JSON
    object, as llama.cpp does: a call cut short)."""
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str | bytes) else arguments
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def anthropic_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """OpenAI-shaped chat messages as the Messages API takes them: (the system prompt, the messages)."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        blocks: list[dict[str, Any]]
        if role == "system":
            system.append(_text_of(content))
            continue
        if role == "tool":
            role = "user"
            result = {
                "type": "tool_result",
                "tool_use_id": str(m.get("tool_call_id", "")),
                "content": _text_of(content),
            }
            blocks = [result]
        else:
            role = "assistant" if role == "assistant" else "user"
            blocks = _blocks_of(content)
            for call in m.get("tool_calls") or ():
                fn = call.get("function") or {}
                use: dict[str, Any] = {
                    "type": "tool_use",
                    "id": str(call.get("id", "")),
                    "name": str(fn.get("name", "")),
                }
                use["input"] = _call_input(fn.get("arguments", "{}"))
                blocks.append(use)
        if out and out[-1]["role"] == role:
            prev = out[-1]
            if isinstance(prev["content"], str):
                prev["content"] = [{"type": "text", "text": prev["content"]}]
            prev["content"] += blocks
        elif len(blocks) == 1 and blocks[0]["type"] == "text":
            out.append({"role": role, "content": blocks[0]["text"]})  # the plain form, as most clients send it
        else:
            out.append({"role": role, "content": blocks})
    return "\n".join(s for s in system if s), out


def anthropic_tools(extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` with OpenAI-shaped `tools` and `tool_choice` (a mix's, config/tools.py) in Anthropic's shapes; any
    already in Anthropic's shape is left as it is."""
    extra = dict(extra)
    tools = extra.get("tools")
    if isinstance(tools, list):
        converted = []
        for tool in tools:
            fn = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
            if isinstance(fn, dict):
                tool = {"name": fn.get("name", ""), "input_schema": fn.get("parameters") or {"type": "object"}}
                if fn.get("description"):
                    tool["description"] = fn["description"]
            converted.append(tool)
        extra["tools"] = converted
    choice = extra.get("tool_choice")
    if choice in ("auto", "none"):
        extra["tool_choice"] = {"type": choice}
    elif choice == "required":
        extra["tool_choice"] = {"type": "any"}
    elif isinstance(choice, dict) and choice.get("type") == "function":
        fn = choice.get("function")
        extra["tool_choice"] = {"type": "tool", "name": fn.get("name", "") if isinstance(fn, dict) else ""}
    return extra
