"""NVIDIA Triton's generate extension: `POST /v2/models/{model}/generate_stream`.

Request: `{"text_input", "max_tokens", "stream": true}`; keys that are not input tensors of the model reach it as
parameters (TensorRT-LLM's ensemble declares `max_tokens` and `stream` as inputs, the vLLM backend reads
`max_tokens` as a sampling parameter). A model version can be pinned with `model: name/versions/2`.

Output length: `max_tokens` caps it. With `ignore_eos: true` in the variant's extra body (its `exact_output`) the
request also carries `min_tokens` = max_tokens: an input of TensorRT-LLM's ensemble (recent backends; it has no
`ignore_eos` input) and a sampling parameter of the vLLM backend, which also reads the `ignore_eos` passed along.

Stream: SSE `data: {"model_name", "model_version", "text_output", ...}`, one event per backend response
(TensorRT-LLM: one token per response unless speculative decoding). Errors: `data: {"error": "..."}`.

End of stream: Triton sends no end marker; the stream ends when the backend's final response has been sent and
Triton closes the chunked body. So the orderly end is the *complete* HTTP body: the connection reaches
`StreamAccumulator.finish` only when the body's chunked terminator arrived (a body cut short is a transport error,
`stream_interrupted`), and a body that stops inside an event is interrupted too. When the vLLM backend is asked for
`return_finish_reason: true`, a response with a real `finish_reason` ("stop", "length") ends the stream itself.

Exact token counts: the vLLM backend with `return_num_output_tokens: true` (and `return_num_input_tokens: true`)
adds `num_output_tokens`, the tokens in this response (not cumulative), and `num_input_tokens`. Ask for them with
the variant's `extra_body`; they are not sent by default because a model that does not declare them as inputs would
receive them as sampling parameters. TensorRT-LLM's ensemble has no such count, but a response that carries several
tokens (speculative decoding, or responses merged under load) says how many with what it returns per token: the
log probabilities of this response's tokens (`output_log_probs`, with `return_log_probs: true`), else
`sequence_length` (the length of this response's `output_ids` in streaming mode). Without them a response is one
token.
"""

from __future__ import annotations

from typing import Any

from loadgen.protocol.dialects._base import (
    Chunk,
    DialectBase,
    RequestLike,
    as_count,
    exact_output,
    joined_prompt,
    load_reply,
    merge_extra,
    normal_finish,
)

__all__ = ["TritonGenerate"]

_NOT_FINISHED = ("", "None", "null", "not_finished")


def _first(value: Any) -> Any:
    """Triton returns one-element tensors as a scalar or as a one-element list."""
    if isinstance(value, list):
        return value[0] if value else None
    return value


def _log_prob_count(obj: dict[str, Any]) -> int | None:
    """How many tokens this response's `output_log_probs` cover (a list of numbers, one beam; `[[...]]` is one
    beam too), or None. The ensemble returns the tensor whether or not log probs were asked for: not asked, it is a
    placeholder of zeros (and `cum_log_probs` 0.0), whose length says nothing."""
    value = obj.get("output_log_probs")
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
        value = value[0]
    if not isinstance(value, list) or not value:
        return None
    if not all(type(v) is float or type(v) is int for v in value):
        return None
    if not any(value) and not _first(obj.get("cum_log_probs")):
        return None
    return len(value)


class TritonGenerate(DialectBase):
    name = "triton"
    path = "/v2/models/{model}/generate_stream"
    ends_at_eof = True
    model_per_request = False
    enforces_length = True

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        body: dict[str, Any] = {"text_input": joined_prompt(spec), "max_tokens": spec.max_tokens, "stream": True}
        if exact_output(extra):
            body["min_tokens"] = spec.max_tokens
        return merge_extra(body, extra)

    def parse(self, payload: bytes) -> Chunk:
        obj = load_reply(payload)
        if isinstance(obj, Chunk):
            return obj
        text = obj.get("text_output")
        if isinstance(text, list):
            has_output = any(isinstance(t, str) and t for t in text)
        else:
            has_output = isinstance(text, str) and bool(text)
        tokens = as_count(obj.get("num_output_tokens"))
        if tokens is None:
            tokens = _log_prob_count(obj)
            if tokens is None:
                tokens = as_count(obj.get("sequence_length"))
        prompt = as_count(obj.get("num_input_tokens"))
        usage = {"prompt_tokens": prompt} if prompt is not None else None
        fr = _first(obj.get("finish_reason"))
        finish = normal_finish(fr) if isinstance(fr, str) and fr not in _NOT_FINISHED else None
        return Chunk(finish is not None, has_output, None, usage, None, finish, None, tokens)
