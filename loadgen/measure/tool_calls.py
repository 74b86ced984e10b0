"""Tools and structured output (`traffic.mixes[].tools`), measured: of the requests that carried tools or a
response_format, which replies were tool calls, how soon the first tool-call piece came, and how soon the first
content token came, apart.

The accumulator marks which token chunks carried a tool call's pieces (`RequestRecord.tool_call_chunks`:
`delta.tool_calls`, the function's name and its argument pieces); every other token chunk is content (or a
reasoning model's thinking, which is neither here). Per successful streamed request that carried tools:

- time to the first tool call: from the request write to the first tool-call chunk (none when the reply called no
  tool);
- time to the first content token: to the first chunk that was neither a tool call's nor thinking (none for a
  reply that was a tool call only: TTFT stays the first token of any kind);
- tool-call tokens: the tool-call chunks' counts (as loadgen counts tokens: the server's cumulative count when it
  streams one, else one per chunk), i.e. the function's name and arguments as the server streamed them.

Whole replies (`stream: false`) have no chunks: they count among the requests that carried tools, not in the times.
Kept in a group's histograms (`TOOL_METRICS`) and, under `tool*` keys, in its `reasoning` counts (a reply's
phases: `add_reasoning` adds these too), so it merges and ships with the group.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadgen.measure.histogram import LatencyHistogram
    from loadgen.measure.records import RequestRecord

__all__ = ["TOOL_METRICS", "add_tool_calls", "tool_call_times"]

# The group histograms this module fills (seconds, as every latency).
TOOL_METRICS: tuple[str, ...] = ("ttft_tool_call", "ttft_content")


def tool_call_times(rec: RequestRecord) -> tuple[float | None, float | None, int]:
    """(time to the first tool call, time to the first content token, tool-call tokens) of a streamed request."""
    marks = rec.tool_call_chunks or ()
    times, tokens = rec.chunk_times, rec.chunk_tokens
    first_call = times[marks[0]] - rec.sent if marks else None
    calls = set(marks)
    thinking = set(rec.reasoning_chunks or ())
    first_content = next((times[i] - rec.sent for i in range(len(times)) if i not in calls and i not in thinking), None)
    return first_call, first_content, sum(tokens[i] for i in marks)


def add_tool_calls(counts: dict[str, int], hist: Callable[[str], LatencyHistogram], rec: RequestRecord) -> None:
    """A successful request of the window into its group's counts (`tool*` keys) and histograms (`hist(metric)`)."""
    if not rec.carried_tools:
        return
    counts["tools_requests"] = counts.get("tools_requests", 0) + 1
    if rec.structured:  # measure/structured.py: a response_format's reply, judged
        key = f"tools_structured_{rec.structured}"
        counts[key] = counts.get(key, 0) + 1
    if not rec.streamed:
        return
    first_call, first_content, call_tokens = tool_call_times(rec)
    if first_call is not None:
        counts["tool_calls"] = counts.get("tool_calls", 0) + 1
        counts["tool_call_tokens"] = counts.get("tool_call_tokens", 0) + call_tokens
        hist("ttft_tool_call").record(first_call)
    if first_content is not None:
        counts["tools_content_replies"] = counts.get("tools_content_replies", 0) + 1
        hist("ttft_content").record(first_content)
