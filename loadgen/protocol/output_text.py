"""The generated text of one stream payload, per dialect: what a stream accumulator keeps when asked to
(`StreamAccumulator(keep_text=True)`: multi-turn sessions send the reply back as history; a tokenizer counts the
tokens of each chunk when the server streams no counts).

The text is the reply's visible content: OpenAI chat `delta.content` (a `refusal` streamed with `content: null`
too), completions `text`, llama.cpp `content`, TGI `token.text` (not of special tokens: EOS is not output text),
Ollama `message.content` / `response`, Triton `text_output`, the Responses API's `response.output_text.delta`,
the Messages API's `text_delta`.
Reasoning and tool calls are not: a session's history holds the answer, not the thoughts. A chunk that carried only
those has no text here, which the tokenizer count sees (a token chunk without text) and then leaves the stream's
counts as they were.

A dialect's `parse` does not hand its decoded object out (dialects are shared, stateless and on the hot path), so
a kept stream decodes each payload a second time: about a microsecond a chunk, paid only by streams that keep text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

__all__ = ["TEXT_DIALECTS", "call_reader", "text_reader", "tool_call_piece"]


def _load(payload: bytes) -> dict[str, Any] | None:
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError:
        return None
    return obj if type(obj) is dict else None


def _first_choice(obj: dict[str, Any]) -> dict[str, Any] | None:
    choices = obj.get("choices")
    choice = choices[0] if type(choices) is list and choices else None
    return choice if type(choice) is dict else None


def _str(v: Any) -> str:
    return v if type(v) is str else ""


def _openai_chat(payload: bytes) -> str:
    if payload == b"[DONE]":
        return ""
    obj = _load(payload)
    choice = _first_choice(obj) if obj is not None else None
    delta = choice.get("delta") if choice is not None else None
    if type(delta) is not dict:
        return ""
    content = delta.get("content")
    if content is None:
        return _str(delta.get("refusal"))
    return _str(content)


def tool_call_piece(payload: bytes) -> tuple[str, str, str]:
    """An OpenAI chat chunk's piece of its first tool call: (its id, its function's name, its arguments' piece), each
    "" where the chunk has none (the id and name come with the call's first piece). A session sends the call back."""
    obj = _load(payload)
    choice = _first_choice(obj) if obj is not None else None
    delta = choice.get("delta") if choice is not None else None
    calls = delta.get("tool_calls") if type(delta) is dict else None
    call = calls[0] if type(calls) is list and calls else None
    if type(call) is not dict:
        return "", "", ""
    fn = call.get("function")
    fn = fn if type(fn) is dict else {}
    return _str(call.get("id")), _str(fn.get("name")), _str(fn.get("arguments"))


def _responses_call_piece(payload: bytes) -> tuple[str, str, str]:
    """A Responses event's piece of a function call: its `call_id` and name from the `response.output_item.added`
    that opens it, its arguments from `response.function_call_arguments.delta`."""
    obj = _load(payload)
    kind = obj.get("type") if obj is not None else None
    if kind == "response.function_call_arguments.delta":
        return "", "", _str(obj.get("delta"))  # type: ignore[union-attr]
    item = obj.get("item") if kind == "response.output_item.added" else None  # type: ignore[union-attr]
    if type(item) is not dict or item.get("type") != "function_call":
        return "", "", ""
    return _str(item.get("call_id")), _str(item.get("name")), _str(item.get("arguments"))


def _openai_responses(payload: bytes) -> str:
    """The answer's text: `response.output_text.delta` (and a refusal's `response.refusal.delta`)."""
    obj = _load(payload)
    kind = obj.get("type") if obj is not None else None
    if kind == "response.output_text.delta" or kind == "response.refusal.delta":
        return _str(obj.get("delta"))  # type: ignore[union-attr]
    return ""


def _anthropic(payload: bytes) -> str:
    """The answer's text: a Messages stream's `text_delta`."""
    obj = _load(payload)
    delta = obj.get("delta") if obj is not None and obj.get("type") == "content_block_delta" else None
    return _str(delta.get("text")) if type(delta) is dict and delta.get("type") == "text_delta" else ""


def _anthropic_call_piece(payload: bytes) -> tuple[str, str, str]:
    """A Messages event's piece of a tool call: its id and name from the `content_block_start` of its `tool_use`
    block, its input's JSON from `input_json_delta`."""
    obj = _load(payload)
    kind = obj.get("type") if obj is not None else None
    if kind == "content_block_delta":
        delta = obj.get("delta")  # type: ignore[union-attr]
        ok = type(delta) is dict and delta.get("type") == "input_json_delta"
        return ("", "", _str(delta.get("partial_json"))) if ok else ("", "", "")  # type: ignore[union-attr]
    block = obj.get("content_block") if kind == "content_block_start" else None  # type: ignore[union-attr]
    if type(block) is not dict or block.get("type") != "tool_use":
        return "", "", ""
    return _str(block.get("id")), _str(block.get("name")), ""


def _openai_completions(payload: bytes) -> str:
    if payload == b"[DONE]":
        return ""
    obj = _load(payload)
    choice = _first_choice(obj) if obj is not None else None
    return _str(choice.get("text")) if choice is not None else ""


def _llamacpp(payload: bytes) -> str:
    obj = _load(payload)
    return _str(obj.get("content")) if obj is not None else ""


def _tgi(payload: bytes) -> str:
    obj = _load(payload)
    token = obj.get("token") if obj is not None else None
    if type(token) is not dict or token.get("special") is True:
        return ""
    return _str(token.get("text"))


def _ollama_chat(payload: bytes) -> str:
    obj = _load(payload)
    message = obj.get("message") if obj is not None else None
    return _str(message.get("content")) if type(message) is dict else ""


def _ollama_generate(payload: bytes) -> str:
    obj = _load(payload)
    return _str(obj.get("response")) if obj is not None else ""


def _triton(payload: bytes) -> str:
    obj = _load(payload)
    text = obj.get("text_output") if obj is not None else None
    if type(text) is list:  # a batch of one, as some ensembles send it
        return "".join(t for t in text if type(t) is str)
    return _str(text)


# By dialect name (`Dialect.name`): a reader per built-in dialect.
_READERS: dict[str, Callable[[bytes], str]] = {
    "openai-chat": _openai_chat,
    "openai-completions": _openai_completions,
    "anthropic-messages": _anthropic,
    "openai-responses": _openai_responses,
    "llamacpp": _llamacpp,
    "tgi": _tgi,
    "ollama-chat": _ollama_chat,
    "ollama-generate": _ollama_generate,
    "triton": _triton,
}
TEXT_DIALECTS: tuple[str, ...] = tuple(_READERS)
# A dialect's reader of tool-call pieces (its id, its name, its arguments' piece), for sessions that send the call
# back; the chat API's by default.
_CALL_READERS: dict[str, Callable[[bytes], tuple[str, str, str]]] = {
    "openai-responses": _responses_call_piece,
    "anthropic-messages": _anthropic_call_piece,
}


def call_reader(dialect_name: str) -> Callable[[bytes], tuple[str, str, str]]:
    """The function from one payload of `dialect_name`'s stream to its piece of a tool call (`tool_call_piece`'s)."""
    return _CALL_READERS.get(dialect_name, tool_call_piece)


def text_reader(dialect_name: str) -> Callable[[bytes], str]:
    """The function from one payload of `dialect_name`'s stream to the text it carried ("" for none).

    Raises ValueError for a dialect without one, naming those that have one."""
    try:
        return _READERS[dialect_name]
    except KeyError:
        raise ValueError(
            f"no output text reader for dialect {dialect_name!r}; dialects with one: {', '.join(TEXT_DIALECTS)}"
        ) from None
