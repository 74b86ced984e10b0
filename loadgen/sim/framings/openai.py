"""OpenAI's chat and completions framings, as vLLM streams them (SSE, one event per engine step, `[DONE]`)."""

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
    _message_words,
    _model,
    _object,
    token_text,
)
from loadgen.sim.framings.tools import answer_choice, tool_messages, tool_request, whole_answer


class _OpenAI(Framing):
    chat = False
    cut_marker = b'"choices":['

    def parse(self, body: dict[str, Any]) -> SimRequest:
        words = self._prompt_words(body)
        # OpenAI's own name first (its reasoning models take no other), then the one every server takes.
        key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
        value = body.get(key)
        if value is None:
            max_tokens = DEFAULT_MAX_TOKENS
        elif not _int(value) or value < 1:
            raise ApiError(400, f"'{key}' must be a positive integer")
        else:
            max_tokens = value
        if body.get("n", 1) != 1:
            raise ApiError(400, "the simulator supports n=1 only")
        stream = _bool(body, "stream", False, 400)
        opts = _object(body, "stream_options", 400)
        priority = body.get("priority", 0)
        if not _int(priority):
            raise ApiError(400, "'priority' must be an integer")
        temperature = body.get("temperature")
        return SimRequest(
            words,
            max_tokens,
            stream,
            _model(body, 400),
            greedy=(_int(temperature) or isinstance(temperature, float)) and temperature == 0,
            include_usage=bool(opts.get("include_usage")),
            # vLLM only honours continuous_usage_stats together with include_usage; accepting it alone is lenient.
            continuous=bool(opts.get("continuous_usage_stats")),
            # Accepted whatever the profile's scheduling (SGLang ignores it too; vLLM without priority scheduling
            # would refuse a non-zero one with 400).
            priority=priority,
        )

    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def _id(self, s: StreamState) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + s.rid

    def _chunk(self, s: StreamState, choices: list[dict[str, Any]], completion_tokens: int | None) -> bytes:
        obj: dict[str, Any] = {
            "id": self._id(s),
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": s.created,
            "model": s.req.model,
            "choices": choices,
        }
        if completion_tokens is not None:
            obj["usage"] = _usage(s, completion_tokens)
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def _choice(self, text: str, finish: str | None, thinking: bool = False) -> dict[str, Any]:
        if self.chat:
            delta = {"reasoning_content": text, "content": None} if thinking else {"content": text}
            return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}

    def head(self, s: StreamState) -> bytes:
        # vLLM's chat stream opens with a role-only chunk as soon as the request is accepted; completions has none.
        if not self.chat:
            return b""
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        return self._chunk(s, [choice], 0 if s.req.continuous else None)

    def tokens(self, s: StreamState, start: int, n: int, final: bool) -> list[Event]:
        # A reasoning reply's thinking first (`reasoning_tokens` of it), then the answer: a step across the boundary
        # is two events, each with its own tokens (and cumulative count); why the reply ended goes with the last.
        thinking = min(max(s.reasoning_tokens - start, 0), n) if self.chat else 0
        events: list[Event] = []
        if thinking:
            finish = "length" if final and thinking == n else None
            choice = self._choice(token_text(s.vocab_offset, start, thinking, s.perturbed), finish, thinking=True)
            events.append((self._chunk(s, [choice], start + thinking if s.req.continuous else None), thinking))
        if thinking < n:
            text = token_text(s.vocab_offset, start + thinking, n - thinking, s.perturbed)
            if s.req.tool_call or s.req.json_reply:  # a tool call's pieces, or JSON content (framings/tools.py)
                choice = answer_choice(s, start + thinking, text, final)
            else:
                choice = self._choice(text, "length" if final else None)
            events.append((self._chunk(s, [choice], start + n if s.req.continuous else None), n - thinking))
        return events

    def end(self, s: StreamState, generated: int) -> bytes:
        if not s.req.include_usage:
            return b"data: [DONE]\n\n"
        obj: dict[str, Any] = {
            "id": self._id(s),
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": s.created,
            "model": s.req.model,
            "choices": [],
            "usage": _usage(s, generated, final=True),
        }
        return b"data: " + orjson.dumps(obj) + b"\n\ndata: [DONE]\n\n"

    def error_event(self) -> bytes:
        return (
            b'data: {"error": {"message": "simulated mid-stream failure (loadgen sim fault injection)", '
            b'"type": "server_error", "code": 500}}\n\ndata: [DONE]\n\n'
        )

    def full(self, s: StreamState, generated: int) -> bytes:
        thinking = min(s.reasoning_tokens, generated) if self.chat else 0
        text = token_text(s.vocab_offset, thinking, generated - thinking, s.perturbed)
        choice: dict[str, Any]
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            finish = whole_answer(message, s, text) if s.req.tool_call or s.req.json_reply else "length"
            if thinking:
                message["reasoning_content"] = token_text(s.vocab_offset, 0, thinking, s.perturbed)
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": "length", "stop_reason": None}
        obj = {
            "id": self._id(s),
            "object": "chat.completion" if self.chat else "text_completion",
            "created": s.created,
            "model": s.req.model,
            "choices": [choice],
            "usage": _usage(s, generated, final=True),
        }
        return orjson.dumps(obj)


def _usage(s: StreamState, completion_tokens: int, final: bool = False) -> dict[str, Any]:
    """vLLM's usage. The final one (not the per-chunk continuous usage) says how many prompt tokens the prefix cache
    served, as vLLM does with `--enable-prompt-tokens-details` when any did."""
    p = s.prompt_tokens
    usage: dict[str, Any] = {
        "prompt_tokens": p,
        "completion_tokens": completion_tokens,
        "total_tokens": p + completion_tokens,
    }
    if final and s.cached_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": s.cached_tokens}
    return usage


class OpenAIChat(_OpenAI):
    chat = True
    reasoning = True

    def parse(self, body: dict[str, Any]) -> SimRequest:
        req = super().parse(body)
        req.tool_call, arguments, req.json_reply = tool_request(body, req.words)
        calls, req.tool_result = tool_messages(body["messages"])
        req.words += calls  # an agent's earlier calls, sent back: the server bills their arguments
        if req.tool_call:  # the call's arguments are as long as its schema asks
            req.max_tokens = min(req.max_tokens, arguments)
        return req

    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        return _message_words(body.get("messages"), 400)


class OpenAICompletions(_OpenAI):
    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            return prompt.split()
        if isinstance(prompt, list) and all(_int(t) for t in prompt):
            return [str(t) for t in prompt]  # token ids: one word per id
        raise ApiError(400, "'prompt' is required: a string, a list of token ids, or a list with one of those")


# ---- TGI ----

# TGI's `error_type` for the statuses the simulator answers with.
