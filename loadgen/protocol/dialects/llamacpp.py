"""llama.cpp's native `POST /completion` (llama-server).

Request: `{"prompt", "n_predict", "stream": true}` (+ `timings_per_token: true` with `continuous_usage_stats`).
Stream (SSE, no `[DONE]`): `data: {"content", "stop": false, "tokens_predicted", "tokens_evaluated", ...}`;
`tokens_predicted` is the cumulative count of generated tokens, so a chunk held back for a multibyte character
(the next chunk then carries two tokens) and the EOS token (empty content, count advanced) are counted where the
count moved. Older servers lack it in partial chunks; then `timings.predicted_n` (with `timings_per_token`) is the
cumulative count, and without either each non-empty chunk is one token. The last event has `stop: true`,
`tokens_predicted`, `tokens_evaluated` (the whole prompt, cached part included), `stop_type` (or, older,
`stopped_eos` / `stopped_word` / `stopped_limit`; "limit" is finish reason "length") and `timings`
{prompt_n, prompt_ms, predicted_n, predicted_ms, predicted_per_token_ms, ...}: kept as the record's
`server_timings`, ground truth for TTFT (prompt_ms) and TPOT (predicted_per_token_ms); its `cache_n` (prompt tokens
reused from the cache) becomes the record's `cached_prompt_tokens`.
Output length: `n_predict` caps it; `ignore_eos: true` (the variant's `exact_output` puts it in the extra body)
makes the server generate exactly n_predict tokens (it bans the end-of-generation tokens), also on its OAI
endpoint. There is no `min_tokens`.
Errors inside the stream: `error: {"code", "message", "type"}` (an SSE field of its own, older servers) or
`data: {"error": {...}}` (newer).
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

__all__ = ["LlamaCppCompletion"]


class LlamaCppCompletion(DialectBase):
    name = "llamacpp"
    path = "/completion"
    enforces_length = True

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        # `model` picks the model on a llama-server that hosts several (router mode); a single-model server ignores it.
        body: dict[str, Any] = {
            "model": model,
            "prompt": joined_prompt(spec),
            "n_predict": spec.max_tokens,
            "stream": True,
        }
        if continuous_usage:
            body["timings_per_token"] = True
        return merge_extra(body, extra)

    def parse(self, payload: bytes) -> Chunk:
        obj = load_reply(payload)
        if isinstance(obj, Chunk):
            return obj
        content = obj.get("content")
        has_output = isinstance(content, str) and bool(content)
        timings = obj.get("timings")
        if not isinstance(timings, dict):
            timings = None
        predicted = as_count(obj.get("tokens_predicted"))
        cum = predicted
        if cum is None and timings is not None:
            cum = as_count(timings.get("predicted_n"))
        if obj.get("stop") is not True:
            return Chunk(False, has_output, cum, None, None, None, timings)
        usage: dict[str, Any] = {}
        prompt = as_count(obj.get("tokens_evaluated"))
        if prompt is not None:
            usage["prompt_tokens"] = prompt
        if predicted is not None:
            usage["completion_tokens"] = predicted
        return Chunk(True, has_output, cum, usage or None, None, _finish(obj), timings)


def _finish(obj: dict[str, Any]) -> str | None:
    """`stop_type` ("eos" / "word" / "limit") of newer servers, else the `stopped_*` flags of older ones."""
    reason = normal_finish(obj.get("stop_type"))
    if reason is None:
        for flag in ("stopped_limit", "stopped_eos", "stopped_word"):
            if obj.get(flag) is True:
                return normal_finish(flag)
    return reason
