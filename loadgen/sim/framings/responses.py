"""OpenAI's Responses API (`POST /v1/responses`), as OpenAI streams it: named SSE events, one
`response.output_text.delta` per engine step (a step of k tokens is one delta carrying k tokens, as vLLM sends it).

Request: `model`, `input` (a string, or input items: messages `{type: message, role, content}` with a string or
`input_text` / `output_text` parts, an agent's earlier `function_call` items and their `function_call_output`s —
each must answer a call made before it, as the API requires), `instructions` (the system prompt),
`max_output_tokens`, `stream`, `temperature` (0: greedy, as on the chat route), `priority` (vLLM's), `tools`
(`{type: function, name, parameters}`) with `tool_choice` (`auto`, `required`, `none`, `{type: function, name}`) and
`text.format` (`json_schema` with its `schema`, or `json_object`), answered as framings/tools.py answers chat.
`store` and `ignore_eos` are accepted (every reply is its full budget anyway).

Stream: `response.created` and `response.in_progress` with the head; the profile's reasoning tokens as a reasoning
item's `response.reasoning_text.delta`s (vLLM's event); then a message item (`output_item.added`,
`content_part.added`, `output_text.delta`s) or a function call (`output_item.added` with its `call_id` and name,
`function_call_arguments.delta` pieces of `{"answer": "…"}`); at the end the items' `*.done` events and the terminal
event with the usage as OpenAI sends it (`input_tokens`, `input_tokens_details.cached_tokens`, `output_tokens`,
`output_tokens_details.reasoning_tokens`): `response.incomplete` (`incomplete_details.reason: max_output_tokens`,
as every reply is its full budget), or `response.completed` for a function call. A fault's mid-stream error is a
`response.failed` event; errors with a status are OpenAI's error JSON. No `sequence_number` (llama.cpp's server
sends none either).
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.sim.framings.base import (
    DEFAULT_MAX_TOKENS,
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

__all__ = ["OpenAIResponses"]

_JSON_HEAD, _JSON_TAIL = '{"answer": "', '"}'  # a JSON reply's object, as framings/tools.py builds it
_TEXT_PARTS = ("input_text", "output_text", "text")


def _event(obj: dict[str, Any]) -> bytes:
    return b"event: " + obj["type"].encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"


def _content_words(content: Any) -> list[str]:
    if isinstance(content, str):
        return content.split()
    if not isinstance(content, list):
        raise ApiError(400, "a message's content must be a string or a list of content parts")
    words: list[str] = []
    for part in content:
        if not isinstance(part, dict) or part.get("type") not in _TEXT_PARTS or not isinstance(part.get("text"), str):
            raise ApiError(400, "the simulator reads text content parts only ({type: input_text, text})")
        words += part["text"].split()
    return words


def _input_words(body: dict[str, Any]) -> tuple[list[str], list[str], str]:
    """(the prompt's words, the words of the agent's earlier calls, the call the last item answers or "")."""
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise ApiError(400, "'instructions' must be a string")
    words = instructions.split() if instructions else []
    items = body.get("input")
    if isinstance(items, str):
        return words + items.split(), [], ""
    if not isinstance(items, list) or not items:
        raise ApiError(400, "'input' is required: a string or a non-empty list of input items")
    calls: list[str] = []
    made: set[str] = set()
    answered = ""
    for item in items:
        kind = item.get("type", "message") if isinstance(item, dict) else None
        answered = ""
        if kind == "message" and isinstance(item.get("role"), str):
            words += _content_words(item.get("content"))
        elif kind == "function_call" and isinstance(item.get("call_id"), str):
            made.add(item["call_id"])
            calls += str(item.get("arguments", "")).split()
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in made:
                raise ApiError(400, f"a function_call_output answers no function_call made before it: {call_id!r}")
            words += str(item.get("output", "")).split()
            answered = call_id
        else:
            raise ApiError(400, "each input item must be a message {role, content}, a function_call or its output")
    return words, calls, answered


def _chat_tools(body: dict[str, Any]) -> dict[str, Any]:
    """The request's tools, tool_choice and text.format in the chat API's shapes, for `tool_request`."""
    out: dict[str, Any] = {}
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise ApiError(400, "'tools' must be a list of {type: function, name, parameters}")
        out["tools"] = []
        for tool in tools:
            if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(tool.get("name"), str):
                raise ApiError(400, "each tool must be {type: function, name, parameters}")
            out["tools"].append({"type": "function", "function": {k: v for k, v in tool.items() if k != "type"}})
        out["tools"] = out["tools"] or None
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
            raise ApiError(400, "'tool_choice' must be none, auto, required or {type: function, name}")
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif choice is not None:
        out["tool_choice"] = choice
    text = body.get("text")
    fmt = text.get("format") if isinstance(text, dict) else None
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind == "json_schema":
            if not isinstance(fmt.get("schema"), dict):
                raise ApiError(400, "'text.format.schema' must be an object with the schema")
            out["response_format"] = {"type": "json_schema", "json_schema": fmt}
        elif kind in ("text", "json_object"):
            out["response_format"] = {"type": kind}
        else:
            raise ApiError(400, "'text.format.type' must be text, json_object or json_schema")
    return out


def _usage(s: StreamState, generated: int) -> dict[str, Any]:
    p = s.prompt_tokens
    return {
        "input_tokens": p,
        "input_tokens_details": {"cached_tokens": s.cached_tokens},
        "output_tokens": generated,
        "output_tokens_details": {"reasoning_tokens": min(s.reasoning_tokens, generated)},
        "total_tokens": p + generated,
    }


class OpenAIResponses(Framing):
    reasoning = True
    cut_marker = b'"delta":'

    def parse(self, body: dict[str, Any]) -> SimRequest:
        words, calls, answered = _input_words(body)
        value = body.get("max_output_tokens")
        if value is None:
            max_tokens = DEFAULT_MAX_TOKENS
        elif not _int(value) or value < 1:
            raise ApiError(400, "'max_output_tokens' must be a positive integer")
        else:
            max_tokens = value
        priority = body.get("priority", 0)
        if not _int(priority):
            raise ApiError(400, "'priority' must be an integer")
        temperature = body.get("temperature")
        req = SimRequest(
            words + calls,  # an agent's earlier calls, sent back: the server bills their arguments
            max_tokens,
            _bool(body, "stream", False, 400),
            _model(body, 400),
            include_usage=True,
            priority=priority,
            greedy=(_int(temperature) or isinstance(temperature, float)) and temperature == 0,
            tool_result=answered,
        )
        req.tool_call, arguments, req.json_reply = tool_request(_chat_tools(body), words)
        if req.tool_call:  # the call's arguments are as long as its schema asks
            req.max_tokens = min(req.max_tokens, arguments)
        return req

    # ---- the response object and its items ----

    def _response(self, s: StreamState, status: str, **fields: Any) -> dict[str, Any]:
        return {
            "id": "resp_" + s.rid,
            "object": "response",
            "created_at": s.created,
            "status": status,
            "model": s.req.model,
            "max_output_tokens": s.req.max_tokens,
            **fields,
        }

    def _piece(self, s: StreamState, first: int, n: int, final: bool) -> str:
        text = token_text(s.vocab_offset, first, n, s.perturbed)
        if not (s.req.tool_call or s.req.json_reply):
            return text
        head = _JSON_HEAD if first == s.reasoning_tokens else ""
        return head + text + (_JSON_TAIL if final else "")

    def _answer(self, s: StreamState, generated: int) -> str:
        answered = generated - min(s.reasoning_tokens, generated)
        return self._piece(s, s.reasoning_tokens, answered, True) if answered else ""

    def _item(self, s: StreamState, status: str, text: str | None) -> dict[str, Any]:
        """The message, or the function call, holding the answer (`text`: its whole text, once done)."""
        if s.req.tool_call:
            return {
                "type": "function_call",
                "id": "fc_" + s.rid,
                "call_id": "call_" + s.rid,
                "name": s.req.tool_call,
                "arguments": text or "",
                "status": status,
            }
        content = [] if text is None else [{"type": "output_text", "text": text, "annotations": []}]
        return {"type": "message", "id": "msg_" + s.rid, "role": "assistant", "status": status, "content": content}

    def _reasoning_item(self, s: StreamState, text: str | None) -> dict[str, Any]:
        content = [] if text is None else [{"type": "reasoning_text", "text": text}]
        return {"type": "reasoning", "id": "rs_" + s.rid, "summary": [], "content": content}

    # ---- the stream ----

    def head(self, s: StreamState) -> bytes:
        response = self._response(s, "in_progress", output=[], usage=None)
        created = {"type": "response.created", "response": response}
        return _event(created) + _event({"type": "response.in_progress", "response": response})

    def tokens(self, s: StreamState, start: int, n: int, final: bool) -> list[Event]:
        r = s.reasoning_tokens
        thinking = min(max(r - start, 0), n)
        events: list[Event] = []
        if thinking:
            opening = b""
            if start == 0:
                item = self._reasoning_item(s, None)
                opening = _event({"type": "response.output_item.added", "output_index": 0, "item": item})
            delta = token_text(s.vocab_offset, start, thinking, s.perturbed)
            thought = {"type": "response.reasoning_text.delta", "item_id": "rs_" + s.rid, "delta": delta}
            events.append((opening + _event(thought | {"output_index": 0, "content_index": 0}), thinking))
        if thinking == n:
            return events
        first, index = start + thinking, 1 if r else 0
        opening = b""
        if first == r:  # the answer opens (after the thinking, closed first)
            if r:
                opening = self._reasoning_done(s)
            opening += _event(
                {
                    "type": "response.output_item.added",
                    "output_index": index,
                    "item": self._item(s, "in_progress", None),
                }
            )
            if not s.req.tool_call:
                part = {"type": "output_text", "text": "", "annotations": []}
                added = {"type": "response.content_part.added", "item_id": "msg_" + s.rid, "output_index": index}
                opening += _event(added | {"content_index": 0, "part": part})
        piece = self._piece(s, first, n - thinking, final)
        event: dict[str, Any]
        if s.req.tool_call:
            event = {"type": "response.function_call_arguments.delta", "item_id": "fc_" + s.rid, "delta": piece}
        else:
            event = {"type": "response.output_text.delta", "item_id": "msg_" + s.rid, "delta": piece}
            event["content_index"] = 0
        events.append((opening + _event(event | {"output_index": index}), n - thinking))
        return events

    def _reasoning_done(self, s: StreamState) -> bytes:
        text = token_text(s.vocab_offset, 0, s.reasoning_tokens, s.perturbed)
        done = {"type": "response.reasoning_text.done", "item_id": "rs_" + s.rid, "output_index": 0, "text": text}
        item = self._reasoning_item(s, text)
        return _event(done | {"content_index": 0}) + _event(
            {"type": "response.output_item.done", "output_index": 0, "item": item}
        )

    def end(self, s: StreamState, generated: int) -> bytes:
        r, out = s.reasoning_tokens, b""
        output: list[dict[str, Any]] = []
        if r:
            output.append(self._reasoning_item(s, token_text(s.vocab_offset, 0, min(r, generated), s.perturbed)))
        if generated <= r:  # thinking to the last token: its item closes here
            out += self._reasoning_done(s) if generated == r else b""
        else:
            text, index = self._answer(s, generated), 1 if r else 0
            item = self._item(s, "completed" if s.req.tool_call else "incomplete", text)
            if s.req.tool_call:
                done = {"type": "response.function_call_arguments.done", "item_id": "fc_" + s.rid, "arguments": text}
                out += _event(done | {"output_index": index, "name": s.req.tool_call})
            else:
                where = {"item_id": "msg_" + s.rid, "output_index": index, "content_index": 0}
                out += _event({"type": "response.output_text.done", **where, "text": text})
                part = {"type": "output_text", "text": text, "annotations": []}
                out += _event({"type": "response.content_part.done", **where, "part": part})
            out += _event({"type": "response.output_item.done", "output_index": index, "item": item})
            output.append(item)
        return out + _event(self._terminal(s, generated, output))

    def _terminal(self, s: StreamState, generated: int, output: list[dict[str, Any]]) -> dict[str, Any]:
        usage = _usage(s, generated)
        if s.req.tool_call and generated > s.reasoning_tokens:
            return {
                "type": "response.completed",
                "response": self._response(s, "completed", output=output, usage=usage),
            }
        # Every reply is its full budget: cut by max_output_tokens, as OpenAI says it.
        details = {"reason": "max_output_tokens"}
        response = self._response(s, "incomplete", output=output, usage=usage, incomplete_details=details)
        return {"type": "response.incomplete", "response": response}

    def error_event(self) -> bytes:
        error = {"code": "server_error", "message": "simulated mid-stream failure (loadgen sim fault injection)"}
        return _event(
            {"type": "response.failed", "response": {"object": "response", "status": "failed", "error": error}}
        )

    def full(self, s: StreamState, generated: int) -> bytes:
        r = s.reasoning_tokens
        output: list[dict[str, Any]] = []
        if r:
            output.append(self._reasoning_item(s, token_text(s.vocab_offset, 0, min(r, generated), s.perturbed)))
        if generated > r:
            output.append(self._item(s, "completed" if s.req.tool_call else "incomplete", self._answer(s, generated)))
        return orjson.dumps(self._terminal(s, generated, output)["response"])
