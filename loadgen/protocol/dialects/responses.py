"""OpenAI's Responses API (`POST /v1/responses`), as OpenAI, vLLM and llama.cpp's server serve it.

The request: `input` holds the conversation as input items (a message `{role, content}` each; an agent's earlier
tool calls as `function_call` items and their results as `function_call_output` items), the system prompt goes in
`instructions` (vLLM and llama.cpp turn it into the first system message), the cap in `max_output_tokens`, and
`store: false` (a benchmark's replies need not be kept: vLLM holds stored responses in memory). Tools and structured
output come from the scenario in the chat API's shapes (config/tools.py) and are sent in the Responses API's:
`tools: [{type: function, name, parameters}]`, `tool_choice: {type: function, name}`, and `text.format` for a
response_format (`{type: json_schema, name, schema}` or `{type: json_object}`).

The stream: SSE events named by their `type` (each also as an `event:` line). The ones that carry generated tokens:
- `response.output_text.delta` and `response.refusal.delta`: the answer;
- `response.reasoning_text.delta` and `response.reasoning_summary_text.delta`: a reasoning model's thinking;
- `response.function_call_arguments.delta`: a tool call's arguments (the call's id and name come with its
  `response.output_item.added`, which carries no token);
and the terminal ones: `response.completed` / `response.incomplete` (the final usage: `input_tokens`,
`output_tokens`, `input_tokens_details.cached_tokens`, `output_tokens_details.reasoning_tokens`; the status says why
the reply ended), `response.failed` and `error` (a failed request, `server_error`). Every other event
(`response.created`, `in_progress`, `output_item.added` of a message, `content_part.*`, `*.done`) carries nothing.
There is no `[DONE]`: the terminal event ends the stream.

Why it ended, in OpenAI chat's words: status `completed` is `stop` (`tool_calls` when the output holds a function
call); `incomplete` is `length` for `max_output_tokens` (OpenAI sends `response.incomplete`; vLLM sends
`response.completed` with status `incomplete`, both read alike) and the `incomplete_details.reason` otherwise.
llama.cpp's server says `completed` even when max_output_tokens cut the reply.

Token counts: the final usage only, no per-event count (no `stream_options` in this API). Each event with tokens is
one token, and a usage total above that is spread over the events at the end (`TokenSource.USAGE_SPREAD`), unless
a scenario `tokenizer` counts each event's text. llama.cpp with `extra_body: {timings_per_token: true}` puts its
cumulative `timings.predicted_n` in every delta: exact counts per event, as for its chat stream; its
`response.completed` carries its `timings` beside the response.

Output length: with `ignore_eos: true` in the variant's extra body (its `exact_output`) vLLM (`ResponsesRequest`
has `ignore_eos`, not `min_tokens`) and llama.cpp generate exactly max_output_tokens; hosted OpenAI rejects the field
(its hosts keep `exact_output` off). Priority classes: vLLM reads `priority` from a Responses body too.
"""

from __future__ import annotations

from typing import Any, cast

from loadgen.protocol.dialects._base import (
    Chunk,
    DialectBase,
    RequestLike,
    as_count,
    chat_messages,
    error_message,
    load_object,
    malformed,
    merge_extra,
)

__all__ = ["OpenAIResponses", "input_items", "responses_tools"]

_NOTHING = Chunk()
# The events that carry generated tokens, by what they carry: the answer, thinking, or a tool call's arguments.
_ANSWER = frozenset({"response.output_text.delta", "response.refusal.delta"})
_REASONING = frozenset({"response.reasoning_text.delta", "response.reasoning_summary_text.delta"})
_TOOL_ARGS = "response.function_call_arguments.delta"
_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


def _usage(raw: Any) -> dict[str, Any] | None:
    """A Responses usage in the keys the accumulator reads (chat's: prompt_tokens, completion_tokens, details)."""
    if type(raw) is not dict:
        return None
    usage: dict[str, Any] = {}
    if "input_tokens" in raw:
        usage["prompt_tokens"] = raw["input_tokens"]
    if "output_tokens" in raw:
        usage["completion_tokens"] = raw["output_tokens"]
    if "total_tokens" in raw:
        usage["total_tokens"] = raw["total_tokens"]
    details = raw.get("input_tokens_details")
    if type(details) is dict:
        usage["prompt_tokens_details"] = details
    details = raw.get("output_tokens_details")
    if type(details) is dict:
        usage["completion_tokens_details"] = details
    return usage


def _calls_a_function(output: Any) -> bool:
    return type(output) is list and any(type(item) is dict and item.get("type") == "function_call" for item in output)


def _finish(response: dict[str, Any]) -> tuple[str | None, str | None]:
    """(why the reply ended in chat's words, or the error of a reply that failed)."""
    status = response.get("status")
    if status == "completed":
        return ("tool_calls" if _calls_a_function(response.get("output")) else "stop"), None
    if status == "incomplete":
        details = response.get("incomplete_details")
        reason = details.get("reason") if type(details) is dict else None
        if reason is None or reason == "max_output_tokens":
            return "length", None
        return (reason if type(reason) is str else "length"), None
    if status == "failed":
        err = response.get("error")
        if type(err) is dict:
            code, message = err.get("code"), err.get("message")
            text = str(message or code or err)
            return None, f"{code}: {text}" if type(code) is str and code and code != text else text
        return None, "response failed (no error given)"
    return None, f"response ended with status {status!r}"


def responses_tools(extra: dict[str, Any]) -> dict[str, Any]:
    """`extra` with the chat API's tools, tool_choice and response_format (config/tools.py builds them so) in the
    Responses API's shapes; anything already in those shapes, and every other key, as given."""
    out = dict(extra)
    tools = out.get("tools")
    if type(tools) is list:
        out["tools"] = [_tool(t) for t in tools]
    choice = out.get("tool_choice")
    if type(choice) is dict and type(choice.get("function")) is dict:
        out["tool_choice"] = {"type": "function", "name": choice["function"].get("name")}
    fmt = out.pop("response_format", None)
    if type(fmt) is dict:
        kind = fmt.get("type")
        spec = fmt.get("json_schema")
        if kind == "json_schema" and type(spec) is dict:
            fmt = {"type": "json_schema", **spec}  # name, schema, strict, description
        text = dict(out["text"]) if type(out.get("text")) is dict else {}
        text["format"] = fmt
        out["text"] = text
    elif fmt is not None:
        out["response_format"] = fmt  # not of the chat API's shape: the server says what it makes of it
    return out


def _tool(tool: Any) -> Any:
    fn = tool.get("function") if type(tool) is dict and tool.get("type") == "function" else None
    if type(fn) is not dict:
        return tool
    return {"type": "function", **fn}


def input_items(messages: list[dict[str, Any]]) -> tuple[str | None, list[dict[str, Any]]]:
    """Chat messages as (instructions, input items): a leading system message's text becomes `instructions`, every
    message a `message` item (with its `type`: llama.cpp cannot tell an assistant's item without it); an
    assistant's tool calls become `function_call` items after its text, and a tool's result a
    `function_call_output`."""
    instructions = None
    if messages and messages[0].get("role") == "system" and type(messages[0].get("content")) is str:
        instructions = messages[0]["content"]
        messages = messages[1:]
    items: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        if role == "tool":
            items.append({"type": "function_call_output", "call_id": m.get("tool_call_id"), "output": m["content"]})
            continue
        calls = m.get("tool_calls") if role == "assistant" else None
        if not calls:
            items.append({"type": "message", "role": role, "content": m.get("content") or ""})
            continue
        if m.get("content"):
            items.append({"type": "message", "role": role, "content": m["content"]})
        for call in calls:
            fn = call.get("function") or {}
            item = {"type": "function_call", "call_id": call.get("id"), "name": fn.get("name"), "arguments": ""}
            item["arguments"] = fn.get("arguments", "")
            items.append(item)
    return instructions, items


class OpenAIResponses(DialectBase):
    name = "openai-responses"
    path = "/v1/responses"
    enforces_length = True  # ignore_eos: vLLM's ResponsesRequest and llama.cpp take it
    priority_in_body = True  # vLLM's ResponsesRequest has `priority`
    replies_whole = True
    chat_template = True

    def __init__(self, stream: bool = True) -> None:
        self.stream = stream
        if not stream:
            self.framing = "json"
            self.accept = "application/json"

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        # No stream_options in this API: `continuous_usage` has nothing to ask for.
        instructions, items = input_items(chat_messages(spec))
        body: dict[str, Any] = {"model": model}
        if instructions is not None:
            body["instructions"] = instructions
        body["input"] = items
        body["max_output_tokens"] = spec.max_tokens
        body["stream"] = self.stream
        body["store"] = False
        if extra and ("tools" in extra or "tool_choice" in extra or "response_format" in extra):
            extra = responses_tools(extra)
        return merge_extra(body, extra)

    def parse(self, payload: bytes) -> Chunk:
        # Runs for every event of every stream: the token deltas are answered first.
        obj = load_object(payload)
        if type(obj) is not dict:  # (a Chunk: why the payload is no JSON object)
            return cast(Chunk, obj)
        kind = obj.get("type")
        if type(kind) is not str:
            if "error" in obj:
                msg = error_message(obj)
                if msg is not None:
                    return Chunk(error=msg)
            return malformed("event (no type)", payload)
        if kind in _ANSWER or kind in _REASONING or kind == _TOOL_ARGS:
            timings = obj.get("timings")  # llama.cpp with timings_per_token: its cumulative count
            cum = None
            if timings is not None:
                if type(timings) is dict:
                    cum = as_count(timings.get("predicted_n"))
                else:
                    timings = None
            output = bool(obj.get("delta"))
            return Chunk(
                False,
                output,
                cum,
                None,
                None,
                None,
                timings,
                None,
                False,
                output and kind in _REASONING,
                output and kind == _TOOL_ARGS,
            )
        if kind in _TERMINAL:
            return self._terminal(obj, payload)
        if kind == "error" or "error" in obj:
            msg = _event_error(obj)
            if msg is not None:
                return Chunk(error=msg)
        if kind == "response.output_item.added":
            item = obj.get("item")
            if type(item) is dict and item.get("type") == "function_call":
                # The call opens (its id and name; no token): marked so a session can send the call back.
                return Chunk(tool_call=True)
        return _NOTHING

    def _terminal(self, obj: dict[str, Any], payload: bytes) -> Chunk:
        response = obj.get("response")
        if type(response) is not dict:
            return malformed(f"{obj['type']} event (no response object)", payload)
        finish, error = _finish(response)
        if error is not None:
            return Chunk(error=error)
        timings = obj.get("timings")  # llama.cpp: beside the response, not in it
        if type(timings) is not dict:
            timings = response.get("timings")
            if type(timings) is not dict:
                timings = None
        return Chunk(True, False, None, _usage(response.get("usage")), None, finish, timings)

    def parse_whole(self, body: bytes) -> tuple[Chunk, str]:
        obj = load_object(body)
        if isinstance(obj, Chunk):
            return obj, ""
        if "status" not in obj:  # an error object (`{"error": {...}}`), or no response at all
            msg = error_message(obj)
            return (Chunk(error=msg) if msg is not None else malformed("reply (no status)", body)), ""
        finish, error = _finish(obj)
        if error is not None:
            return Chunk(error=error), ""
        output = obj.get("output")
        if type(output) is not list:
            return malformed("reply (no output list)", body), ""
        text, answer, reasoning, tool = [], False, False, False
        for item in output:
            if type(item) is not dict:
                continue
            kind = item.get("type")
            if kind == "message" and type(item.get("content")) is list:
                for part in item["content"]:
                    if type(part) is dict and part.get("type") in ("output_text", "refusal"):
                        piece = part.get("text") if part["type"] == "output_text" else part.get("refusal")
                        if type(piece) is str and piece:
                            text.append(piece)
                            answer = True
            elif kind == "function_call":
                tool = True
            elif kind == "reasoning":
                reasoning = True
        usage = _usage(obj.get("usage"))
        cum = as_count(usage.get("completion_tokens")) if usage is not None else None
        chunk = Chunk(True, answer or tool or reasoning, cum, usage, None, finish)
        chunk.tool_call = tool and not answer
        chunk.reasoning = reasoning and not answer and not tool
        return chunk, "".join(text)


def _event_error(obj: dict[str, Any]) -> str | None:
    """The message of an `error` event (`{type: error, code, message}`) or of an error object (`{error: {...}}`)."""
    if obj.get("type") == "error" and "error" not in obj:
        code, message = obj.get("code"), obj.get("message")
        text = str(message or code or "error")
        return f"{code}: {text}" if type(code) is str and code and code != text else text
    return error_message(obj)
