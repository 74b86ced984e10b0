"""Hugging Face TGI's native `POST /generate_stream`.

Request: `{"inputs", "parameters": {"max_new_tokens", "details": true}}` (the path makes it a stream).
Stream (SSE, `data:` without a space, `:` keep-alives): one event per generated token,
`{"index", "token": {"id", "text", "logprob", "special"}, "generated_text": null, "details": null}`. `index` counts
tokens from 1, so it is the cumulative count. Special tokens (EOS) are generated tokens whose text is not output;
a token whose text is empty (a multibyte character not yet complete) is still a token. The last event carries
`generated_text` and, because we ask for `details`, `details.generated_tokens` / `input_length`. No `[DONE]`.
Output length: `max_new_tokens` is only a cap. TGI's parameters have no `ignore_eos` nor a minimum length, so a
request may stop early at EOS: the report says `max_only` for such a variant.
TGI reports nothing about its prefix cache: records get no `cached_prompt_tokens`.
Errors inside the stream: `{"error": "...", "error_type": "generation"}`.
"""

from __future__ import annotations

from typing import Any

from loadgen.protocol.dialects._base import (
    Chunk,
    DialectBase,
    RequestLike,
    as_count,
    joined_prompt,
    load_reply,
    merge_extra,
    normal_finish,
)

__all__ = ["TGIGenerate"]


class TGIGenerate(DialectBase):
    name = "tgi"
    path = "/generate_stream"
    model_per_request = False

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        # TGI serves one model; `model` is not part of the request. Every event carries its index, so
        # `continuous_usage` has nothing to turn on.
        body: dict[str, Any] = {
            "inputs": joined_prompt(spec),
            "parameters": {"max_new_tokens": spec.max_tokens, "details": True},
        }
        return merge_extra(body, extra)

    def parse(self, payload: bytes) -> Chunk:
        obj = load_reply(payload)
        if isinstance(obj, Chunk):
            return obj
        token = obj.get("token")
        has_output = isinstance(token, dict)
        done = obj.get("generated_text") is not None
        usage: dict[str, Any] | None = None
        finish: str | None = None
        details = obj.get("details")
        if isinstance(details, dict):
            usage = {}
            pt, ct = as_count(details.get("input_length")), as_count(details.get("generated_tokens"))
            if pt is not None:
                usage["prompt_tokens"] = pt
            if ct is not None:
                usage["completion_tokens"] = ct
            finish = normal_finish(details.get("finish_reason"))
        cum = as_count(obj.get("index")) if has_output else None
        return Chunk(done, has_output, cum, usage, None, finish)
