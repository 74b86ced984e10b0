"""A reasoning model's two phases, measured apart: its thinking (`delta.reasoning_content` / `delta.reasoning`, as
vLLM with a reasoning parser, SGLang, DeepSeek's API and llama.cpp with `--reasoning-format` stream it) and its
answer (`delta.content`, tool calls, a refusal).

The accumulator marks which token chunks carried thinking only (`RequestRecord.reasoning_chunks`); every other token
chunk is the answer's. Per successful request with any reasoning:

- time to the first reasoning token and to the first answer token, from the request write (TTFT stays the first
  token of either kind);
- reasoning and answer tokens: the chunks' counts (as loadgen counts tokens: the server's cumulative count when it
  streams one, else one per chunk); the server's `completion_tokens_details.reasoning_tokens`, when its usage has
  it, replaces the counted reasoning tokens, and the answer is then the usage total less it;
- the TPOT of each phase, TPOT's own definition within it: (its last chunk − its first) ÷ (its tokens − those of
  its first chunk). A phase that comes back after the other (thinking between tool calls) spans the gap.

A request whose server counted reasoning tokens but streamed no thinking (OpenAI's o-series hides it) adds its
token counts only. Kept in a group's histograms (`REASONING_METRICS`) and its `reasoning` counts, so it merges and
ships with the group.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadgen.measure.tool_calls import add_tool_calls

if TYPE_CHECKING:
    from loadgen.measure.histogram import LatencyHistogram
    from loadgen.measure.records import RequestRecord

__all__ = ["REASONING_METRICS", "ReasoningPhases", "add_reasoning", "reasoning_phases"]

# The group histograms this module fills (seconds, as every latency).
REASONING_METRICS: tuple[str, ...] = ("ttft_reasoning", "ttft_answer", "tpot_reasoning", "tpot_answer")


@dataclass(frozen=True, slots=True)
class ReasoningPhases:
    ttft_reasoning: float | None
    ttft_answer: float | None
    reasoning_tokens: int
    answer_tokens: int
    tpot_reasoning: float | None
    tpot_answer: float | None
    # The reasoning count is the server's (`completion_tokens_details.reasoning_tokens`), not the chunks'.
    from_server: bool


def _tpot(times: list[float], tokens: list[int]) -> float | None:
    denom = sum(tokens) - tokens[0] if tokens else 0
    return (times[-1] - times[0]) / denom if denom > 0 else None


def reasoning_phases(rec: RequestRecord) -> ReasoningPhases | None:
    """The request's two phases, or None when it had no reasoning (no thinking chunk, no reasoning tokens counted
    by the server)."""
    marks = rec.reasoning_chunks
    if not marks and not rec.reasoning_tokens:
        return None
    times, tokens = rec.chunk_times, rec.chunk_tokens
    thinking = set(marks or ())
    r_times = [times[i] for i in sorted(thinking)]
    r_tokens = [tokens[i] for i in sorted(thinking)]
    a_index = [i for i in range(len(times)) if i not in thinking]
    a_times = [times[i] for i in a_index]
    a_tokens = [tokens[i] for i in a_index]
    counted_r, counted_a = sum(r_tokens), sum(a_tokens)
    server = rec.reasoning_tokens
    if server is not None:
        reasoning = server
        answer = max(rec.output_token_count - server, 0)
    else:
        reasoning, answer = counted_r, counted_a + rec.output_count_beyond_chunks
    return ReasoningPhases(
        r_times[0] - rec.sent if r_times else None,
        a_times[0] - rec.sent if a_times else None,
        reasoning,
        answer,
        _tpot(r_times, r_tokens),
        _tpot(a_times, a_tokens),
        server is not None,
    )


def add_reasoning(counts: dict[str, int], hist: Callable[[str], LatencyHistogram], rec: RequestRecord) -> None:
    """A successful request of the window into its group's `reasoning` counts and histograms (`hist(metric)`); with
    its tool-call split, when it carried tools (measure/tool_calls.py: `tool*` keys of the same counts)."""
    add_tool_calls(counts, hist, rec)
    phases = reasoning_phases(rec)
    if phases is None:
        return
    counts["requests"] = counts.get("requests", 0) + 1
    counts["reasoning_tokens"] = counts.get("reasoning_tokens", 0) + phases.reasoning_tokens
    counts["answer_tokens"] = counts.get("answer_tokens", 0) + phases.answer_tokens
    if phases.from_server:
        counts["counted_by_server"] = counts.get("counted_by_server", 0) + 1
    for metric in REASONING_METRICS:
        value = getattr(phases, metric)
        if value is not None:
            hist(metric).record(value)
