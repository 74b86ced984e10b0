"""OpenAI chat and completions streams, as served by vLLM, SGLang, llama.cpp's OAI server, TensorRT-LLM
(`trtllm-serve`), LightLLM, TGI's Messages API and hosted OpenAI-compatible APIs.

Quirks handled here:
- usage arrives in a final chunk with empty `choices` (totals, not tokens carried by that chunk);
- vLLM / SGLang with `stream_options.continuous_usage_stats` put cumulative `usage` in every chunk: exact per-chunk
  token counts, including an empty-content chunk whose count advanced (a character held back until its last byte);
- llama.cpp's server sends `timings` (and, with `timings_per_token: true`, a cumulative `timings.predicted_n` in
  every chunk, used as the token count when there is no per-chunk usage);
- cached prompt tokens: vLLM / SGLang / OpenAI put `usage.prompt_tokens_details.cached_tokens` in the final usage,
  llama.cpp `timings.cache_n`; both are kept in the chunk's usage / timings and read by the accumulator;
- EOS arrives as a chunk with `finish_reason` and an empty delta: not a token unless the server's count advanced;
- a refusal streams in `delta.refusal` with `content: null`: output like content;
- older llama.cpp / TGI put `usage` on the last chunk that still has `choices`: the accumulator only trusts
  cumulative counts that started with the first token, so those totals are not dumped onto the last chunk.

Output length: `max_tokens` caps it (in chat requests to OpenAI's API `max_completion_tokens`, which its reasoning
models require: the variant's `max_tokens_field`, `dialect_for`); with `ignore_eos: true` in the variant's extra
body (its `exact_output`) the body also carries `min_tokens` = max_tokens, so vLLM, SGLang and TensorRT-LLM
generate exactly max_tokens even past a stop token of the model's generation config (llama.cpp's OAI server
honours `ignore_eos` and ignores `min_tokens`). Hosted OpenAI rejects both fields: its variants keep `exact_output`
off.

Whole replies (a variant's `stream: false`, `dialect_for`): the body says `stream: false` and carries no
`stream_options` (vLLM refuses them without a stream); the reply is one `chat.completion` / `text_completion` JSON
object, read whole by `parse_whole`: its usage gives the output tokens, `message.content` / `text` the text.

Priority classes: a class's `priority` goes in the body (vLLM: lower first, with `--scheduling-policy priority`,
else a non-zero value is refused with 400; SGLang: with `--enable-priority-scheduling`, higher first unless
`--schedule-low-priority-values-first`), merged like `extra_body` (config/classes.py).
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
    exact_output,
    joined_prompt,
    load_object,
    load_reply,
    malformed,
    merge_extra,
)

__all__ = ["OpenAIChat", "OpenAICompletions"]

_DONE = Chunk(done=True)
# What a choice carried (`_choice_output`): no generated token, an answer's (content, refusal), only a reasoning
# model's thinking, or only a tool call's pieces (its name, its arguments).
_NONE, _ANSWER, _REASONING, _TOOL = 0, 1, 2, 3


class _OpenAIBase(DialectBase):
    enforces_length = True
    # vLLM's and SGLang's OpenAI servers read `priority` (an int) from chat and completions bodies alike.
    priority_in_body = True
    replies_whole = True

    def __init__(self, stream: bool = True) -> None:
        self.stream = stream
        if not stream:
            self.framing = "json"
            self.accept = "application/json"

    def _stream_fields(self, body: dict[str, Any], continuous_usage: bool) -> None:
        """`stream` and, for a stream, its options (usage at the end, or in every chunk)."""
        body["stream"] = self.stream
        if self.stream:
            opts: dict[str, Any] = {"include_usage": True}
            if continuous_usage:
                opts["continuous_usage_stats"] = True
            body["stream_options"] = opts

    def parse_whole(self, body: bytes) -> tuple[Chunk, str]:
        obj = load_reply(body)
        if isinstance(obj, Chunk):
            return obj, ""
        usage = obj.get("usage")
        if type(usage) is not dict:
            usage = None
        choices = obj.get("choices")
        choice = choices[0] if type(choices) is list and choices else None
        if type(choice) is not dict:
            return malformed("reply (no choice)", body), ""
        output, text = self._whole_output(choice)
        finish = choice.get("finish_reason")
        cum = as_count(usage.get("completion_tokens")) if usage is not None else None
        chunk = Chunk(True, output != _NONE, cum, usage, None, finish if type(finish) is str else None)
        chunk.reasoning = output == _REASONING
        chunk.tool_call = output == _TOOL
        return chunk, text

    def _whole_output(self, choice: dict[str, Any]) -> tuple[int, str]:
        """What a whole reply's choice carried (`_NONE`, `_ANSWER`, `_REASONING`) and its text."""
        raise NotImplementedError

    def parse(self, payload: bytes) -> Chunk:
        # Runs for every chunk of every stream: type checks by identity, dict lookups only for keys that are there.
        if payload == b"[DONE]":
            return _DONE
        obj = load_object(payload)
        if type(obj) is not dict:  # (a Chunk: why the payload is no JSON object)
            return cast(Chunk, obj)
        if "error" in obj or obj.get("object") == "error":
            msg = error_message(obj)
            if msg is not None:
                return Chunk(error=msg)
        usage = obj.get("usage")
        if type(usage) is not dict:
            usage = None
        timings = obj.get("timings")  # llama.cpp
        if timings is not None and type(timings) is not dict:
            timings = None
        choices = obj.get("choices")
        if not choices:
            # The final usage-only chunk: totals for the request, not tokens carried by this chunk.
            return Chunk(False, False, None, usage, None, None, timings)
        choice = choices[0] if type(choices) is list else None
        if type(choice) is not dict:
            return malformed("choice", payload)
        cum = None
        if usage is not None:
            cum = usage.get("completion_tokens")
            if type(cum) is not int or cum < 0:
                cum = as_count(cum)
        if cum is None and timings is not None:
            cum = as_count(timings.get("predicted_n"))
        finish = choice.get("finish_reason")
        output = self._choice_output(choice)
        return Chunk(
            False,
            output != _NONE,
            cum,
            usage,
            None,
            finish if type(finish) is str else None,
            timings,
            None,
            False,
            output == _REASONING,
            output == _TOOL,
        )

    def _choice_output(self, choice: dict[str, Any]) -> int:
        """What the choice carried: `_NONE`, `_ANSWER` (generated tokens) or `_REASONING` (thinking only)."""
        raise NotImplementedError


class OpenAIChat(_OpenAIBase):
    chat_template = True
    name = "openai-chat"
    path = "/v1/chat/completions"
    takes_images = True  # `image_url` content parts (chat_messages)

    def __init__(self, max_tokens_key: str = "max_tokens", stream: bool = True) -> None:
        super().__init__(stream)
        # The field that caps the output: `max_completion_tokens` for OpenAI's API (a variant's max_tokens_field).
        self.max_tokens_key = max_tokens_key

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        body: dict[str, Any] = {"model": model, "messages": chat_messages(spec), self.max_tokens_key: spec.max_tokens}
        self._stream_fields(body, continuous_usage)
        if exact_output(extra):
            body["min_tokens"] = spec.max_tokens
        return merge_extra(body, extra)

    def _choice_output(self, choice: dict[str, Any]) -> int:
        delta = choice.get("delta")
        if type(delta) is not dict:
            return _NONE
        # Reasoning models stream thoughts before content; both are generated tokens and count for TTFT, and a
        # chunk of thoughts alone is told apart (time to the first answer token). A refusal comes in `refusal` with
        # `content: null` (OpenAI): generated tokens too. `content` may be a list of parts (Mistral's
        # `[{"type": "thinking", "thinking": []}]`): any part is output, even one with nothing to show yet, as a
        # chunk held back for a multibyte character is. A chunk with thoughts and content both is an answer's.
        # A tool call's pieces (`delta.tool_calls`, no content) are told apart: time to the first tool call.
        if delta.get("content") or delta.get("refusal"):
            return _ANSWER
        if delta.get("tool_calls"):
            return _TOOL
        if delta.get("reasoning_content") or delta.get("reasoning"):
            return _REASONING
        return _NONE

    def _whole_output(self, choice: dict[str, Any]) -> tuple[int, str]:
        message = choice.get("message")
        if type(message) is not dict:
            return _NONE, ""
        content = message.get("content")
        text = content if type(content) is str else ""
        if not text and type(message.get("refusal")) is str:
            text = message["refusal"]
        if content or message.get("refusal"):
            return _ANSWER, text
        if message.get("tool_calls"):
            return _TOOL, text
        if message.get("reasoning_content") or message.get("reasoning"):
            return _REASONING, text
        return _NONE, text


class OpenAICompletions(_OpenAIBase):
    name = "openai-completions"
    path = "/v1/completions"

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        body: dict[str, Any] = {"model": model, "prompt": joined_prompt(spec), "max_tokens": spec.max_tokens}
        self._stream_fields(body, continuous_usage)
        if exact_output(extra):
            body["min_tokens"] = spec.max_tokens
        return merge_extra(body, extra)

    def _choice_output(self, choice: dict[str, Any]) -> int:
        return _ANSWER if choice.get("text") else _NONE

    def _whole_output(self, choice: dict[str, Any]) -> tuple[int, str]:
        text = choice.get("text")
        return (_ANSWER, text) if type(text) is str and text else (_NONE, "")
