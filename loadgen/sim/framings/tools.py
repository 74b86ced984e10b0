"""Tools and structured output on the simulator's OpenAI chat route, as vLLM with a tool parser and guided decoding
answers them.

A request with `tools` is answered with a tool call instead of content when its `tool_choice` says so (`required`,
or a function named), and with `auto` for a share of prompts (`TOOL_CALL_SHARE`, drawn from the prompt, so every
variant answers the same prompt alike); `none` never calls one. The call names the named function, else one drawn
from the prompt, and its arguments are a JSON object of that function's parameters: as many tokens as the schema
asks (`ARG_TOKENS` per parameter, a string's more), at most max_tokens. They stream as `delta.tool_calls` pieces:
the first with the call's id, type and function name, every one with its argument tokens; the reply ends with
finish_reason `tool_calls`. With `response_format` json_schema or json_object the content is a JSON object
(`{"answer": "<the tokens>"}`), valid once the reply is whole.
"""

from __future__ import annotations

import hashlib
from typing import Any

from loadgen.sim.framings.base import ApiError, StreamState

__all__ = ["TOOL_CALL_SHARE", "answer_choice", "tool_messages", "tool_request", "whole_answer"]

# With tool_choice auto: the share of prompts the simulated model answers with a tool call.
TOOL_CALL_SHARE = 0.5
# Argument tokens per parameter of the called function (a string's value takes more), and the object's braces.
ARG_TOKENS = {"string": 6, "integer": 2, "number": 2, "boolean": 2}
_BRACES = 2
_JSON_KEY = "answer"


def _draw(words: list[str]) -> int:
    return int.from_bytes(hashlib.blake2b(" ".join(words).encode(), digest_size=8).digest(), "big")


def _functions(tools: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(tools, list) or not tools:
        raise ApiError(400, "'tools' must be a non-empty list of {type: function, function: {name, parameters}}")
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) and tool.get("type") == "function" else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ApiError(400, "each tool must be {type: function, function: {name, parameters}}")
        params = fn.get("parameters", {})
        out[fn["name"]] = params if isinstance(params, dict) else {}
    return out


def _argument_tokens(params: dict[str, Any]) -> int:
    props = params.get("properties")
    if not isinstance(props, dict):
        return _BRACES
    types = [p.get("type") if isinstance(p, dict) else None for p in props.values()]
    return _BRACES + sum(ARG_TOKENS.get(t, 2) if isinstance(t, str) else 2 for t in types)


def tool_request(body: dict[str, Any], words: list[str]) -> tuple[str, int, bool]:
    """(the function the reply calls, "" for none; its argument tokens; whether the content is JSON)."""
    fmt = body.get("response_format")
    json_reply = False
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind not in ("text", "json_object", "json_schema"):
            raise ApiError(400, "'response_format.type' must be text, json_object or json_schema")
        if kind == "json_schema" and not isinstance(fmt.get("json_schema"), dict):
            raise ApiError(400, "'response_format.json_schema' must be an object with the schema")
        json_reply = kind != "text"
    tools = body.get("tools")
    choice = body.get("tool_choice", "auto" if tools else "none")
    if not tools:
        if choice not in (None, "none"):
            raise ApiError(400, "'tool_choice' needs 'tools'")
        return "", 0, json_reply
    functions = _functions(tools)
    names = list(functions)
    draw = _draw(words)
    if isinstance(choice, dict):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if name not in functions:
            raise ApiError(400, f"'tool_choice' names a function that is not in 'tools': {name!r}")
    elif choice == "required" or (choice == "auto" and (draw >> 11) / float(1 << 53) < TOOL_CALL_SHARE):
        name = names[draw % len(names)]
    elif choice in ("auto", "none"):
        return "", 0, json_reply
    else:
        raise ApiError(400, "'tool_choice' must be none, auto, required or {type: function, function: {name}}")
    return name, _argument_tokens(functions[name]), json_reply


def tool_messages(messages: list[Any]) -> tuple[list[str], str]:
    """An agent's history: the words of the tool calls its assistant messages carry (their arguments, billed as
    prompt), and the id of the call the last message answers (`role: tool`; "": it is no tool result). A tool
    result must answer a call made earlier in the conversation, as the chat API requires (else 400)."""
    words: list[str] = []
    made: set[str] = set()
    for m in messages:  # each a dict with a string role (checked by the prompt's reader)
        calls = m.get("tool_calls") if m["role"] == "assistant" else None
        for call in calls if isinstance(calls, list) else ():
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict) or not isinstance(call.get("id"), str):
                raise ApiError(400, "each of an assistant's tool_calls needs an id and a function")
            made.add(call["id"])
            words += str(fn.get("arguments", "")).split()
        if m["role"] == "tool" and m.get("tool_call_id") not in made:
            raise ApiError(400, f"a tool message answers no tool call made before it: {m.get('tool_call_id')!r}")
    last = messages[-1]
    return words, str(last["tool_call_id"]) if last["role"] == "tool" else ""


def _wrapped(s: StreamState, first: int, text: str, final: bool) -> str:
    """A JSON object's piece: its opening with the reply's first answer token, its closing with the last."""
    head = '{"' + _JSON_KEY + '": "' if first == s.reasoning_tokens else ""
    return head + text + ('"}' if final else "")


def answer_choice(s: StreamState, first: int, text: str, final: bool) -> dict[str, Any]:
    """The choice of a tool call's piece, or of JSON content, carrying answer tokens from position `first` on."""
    piece = _wrapped(s, first, text, final)
    if not s.req.tool_call:
        return {"index": 0, "delta": {"content": piece}, "logprobs": None, "finish_reason": "length" if final else None}
    call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
    if first == s.reasoning_tokens:  # the call opens: its id, type and name come with its first piece
        call = {"index": 0, "id": "call_" + s.rid, "type": "function"}
        call["function"] = {"name": s.req.tool_call, "arguments": piece}
    delta = {"tool_calls": [call]}
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": "tool_calls" if final else None}


def whole_answer(message: dict[str, Any], s: StreamState, text: str) -> str:
    """A whole reply's message as a tool call or JSON content; its finish reason."""
    if not s.req.tool_call:
        message["content"] = '{"' + _JSON_KEY + '": "' + text + '"}'
        return "length"
    message["content"] = None
    fn = {"name": s.req.tool_call, "arguments": '{"' + _JSON_KEY + '": "' + text + '"}'}
    message["tool_calls"] = [{"id": "call_" + s.rid, "type": "function", "function": fn}]
    return "tool_calls"
