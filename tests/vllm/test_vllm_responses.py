"""The openai-responses dialect against vLLM's own `/v1/responses` (CPU build, SmolLM2-135M-Instruct): one short run.

vLLM's Responses stream (no harmony, no reasoning parser for this model) writes one `response.output_text.delta` per
engine step and ends with `response.completed`, its status `incomplete` when max_output_tokens cut the reply, with
the usage (`input_tokens_details.cached_tokens` with `--enable-prompt-tokens-details`). Held:
- exact output: `exact_output` sends `ignore_eos: true` alone (vLLM's ResponsesRequest takes it; it has no
  `min_tokens`), and every reply is exactly its max_output_tokens by vLLM's usage, finish reason `length`;
- token counts: the events' tokens are the usage's. Mostly one token a delta on this engine (no speculative
  decoding), but not always: one request of 11 streamed its 12 tokens in 5 deltas, the same request in two runs
  (likely tokens with no text of their own, such as special tokens generated past EOS under ignore_eos, which get no
  delta). With no per-event count the usage is then spread over that request's deltas (`usage_spread`, per-token
  ITL an estimate there), never miscounted. A usage one above the deltas is the accumulator's end-of-sequence rule
  (a token with no text, left out of the chunks and the per-token ITL, still in the count): seen once in CI, 11
  deltas for 12 tokens;
- the cached prompt tokens and the prompt tokens come from the usage.
"""

from __future__ import annotations

from typing import Any

import pytest

from .test_vllm_engine import _run

pytestmark = pytest.mark.vllm


def test_exact_lengths_and_counts_are_vllms_own(vllm_server: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    variant: dict[str, Any] = {"dialect": "openai-responses", "exact_output": True, "continuous_usage_stats": False}
    run = _run(
        tmp_path_factory.mktemp("vllm-responses"),
        "responses",
        vllm_server,
        variant,
        load={"users": 2, "duration": "12s", "warmup": 0},
    )
    ok = [r for r in run["records"] if r["error"] is None and not r["cut_by_stop"] and not r["cancelled"]]
    assert len(ok) >= 4, [r["error_detail"] for r in run["records"]]
    assert [r["output_tokens"] for r in ok] == [r["max_tokens"] for r in ok]  # vLLM's usage: exactly the cap
    for r in ok:  # the chunks carry the usage's tokens, or all but the one textless token the EOS rule leaves out
        beyond = r["output_tokens"] - sum(r["chunk_tokens"])
        assert beyond == 0 or (beyond == 1 and r["token_source"] == "one_per_chunk"), r
    assert {r["finish_reason"] for r in ok} == {"length"}  # status incomplete on a completed event
    assert all(r["prompt_tokens"] > 0 and r["cached_prompt_tokens"] is not None for r in ok)
    assert set(run["variant"]["overall"]["token_count_source"]) <= {"one_per_chunk", "usage_spread"}
    assert sum(r["token_source"] == "one_per_chunk" for r in ok) >= len(ok) / 2
    assert run["variant"]["output_length"] == "enforced"
