"""Tools and structured output, measured (measure/tool_calls.py): the report's `variants[].tool_calls` (per variant
and per mix) and its Markdown and HTML section. Absent when no request of the variant carried tools or a
response_format.
"""

from __future__ import annotations

from typing import Any

from loadgen.measure.aggregate import GroupStats
from loadgen.measure.structured import VERDICTS
from loadgen.measure.tool_calls import TOOL_METRICS
from loadgen.report.numbers import SHARE, figure, percent, stat_ms
from loadgen.report.table_section import html_table_section, markdown_table_section

__all__ = ["tool_calls_entry", "tool_calls_html", "tool_calls_json", "tool_calls_lines"]

_HEAD = (
    "variant",
    "requests with tools",
    "tool-call replies",
    "tool-call share",
    "tool-call tokens (mean)",
    "first tool call p50 ms",
    "first tool call p99 ms",
    "first content p50 ms",
    "first content p99 ms",
    "structured valid",
)
_NOTE = (
    "Per successful request that carried tools or a response_format (traffic.mixes[].tools): the share of replies "
    "that called a tool (streamed delta.tool_calls), the time from the request write to the first tool-call piece "
    "and to the first content token (none for a reply that only called a tool; TTFT is the first token of either), "
    "and the tool call's tokens (its name and arguments, as the server counted or one per chunk). Whole replies "
    "(stream: false) count among the requests only. Structured valid: of the successful replies a response_format "
    "asked for, the share that parsed as JSON and matched its schema (an object for json_object), of how many."
)


def _group(g: GroupStats) -> dict[str, Any] | None:
    counts = g.reasoning  # the reply's phases: tool calls under `tool*` keys (measure/tool_calls.py)
    n = counts.get("tools_requests", 0)
    if not n:
        return None
    calls = counts.get("tool_calls", 0)
    tokens = counts.get("tool_call_tokens", 0)
    out: dict[str, Any] = {
        "requests": n,
        "tool_calls": calls,
        "tool_call_share": round(calls / n, 4),
        "tool_call_tokens": tokens,
        "tool_call_tokens_mean": round(tokens / calls, 2) if calls else None,
        "content_replies": counts.get("tools_content_replies", 0),
        "structured": _structured(counts),
    }
    for metric in TOOL_METRICS:
        h = g.hists.get(metric)
        out[f"{metric}_ms"] = h.summary_ms() if h is not None and h.count else None
    return out


def _structured(counts: dict[str, int]) -> dict[str, Any] | None:
    """The replies a response_format asked for, by verdict (measure/structured.py); None when none was judged."""
    out: dict[str, Any] = {k: counts.get(f"tools_structured_{k}", 0) for k in VERDICTS}
    judged = sum(out.values())
    if not judged:
        return None
    return {"judged": judged, **out, "valid_share": round(out["valid"] / judged, 4)}


def tool_calls_json(merged: GroupStats, mixes: dict[str, GroupStats]) -> dict[str, Any] | None:
    """The variant's tool calls over all its mixes, and per mix (only mixes with tools); None without any."""
    out = _group(merged)
    if out is None:
        return None
    out["mixes"] = {m: x for m, g in sorted(mixes.items()) if (x := _group(g)) is not None}
    return out


def tool_calls_entry(merged: GroupStats, mixes: dict[str, GroupStats]) -> dict[str, Any]:
    """`{"tool_calls": ...}` for the variant's report entry, or {} when none of its requests carried tools."""
    out = tool_calls_json(merged, mixes)
    return {} if out is None else {"tool_calls": out}


def _rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for v in report["variants"]:
        x = v.get("tool_calls")
        if x is None:
            continue
        first_call, first_content = x["ttft_tool_call_ms"], x["ttft_content_ms"]
        rows.append(
            [
                v["name"],
                str(x["requests"]),
                str(x["tool_calls"]),
                percent(x["tool_call_share"], SHARE),
                figure(x["tool_call_tokens_mean"]),
                stat_ms(first_call, "p50"),
                stat_ms(first_call, "p99"),
                stat_ms(first_content, "p50"),
                stat_ms(first_content, "p99"),
                _valid(x.get("structured")),
            ]
        )
    return rows


def _valid(st: dict[str, Any] | None) -> str:
    return "–" if st is None else f"{percent(st['valid_share'], SHARE)} of {st['judged']}"


def tool_calls_lines(report: dict[str, Any]) -> list[str]:
    """The Markdown section (no lines when no variant's requests carried tools)."""
    rows = _rows(report)
    return markdown_table_section("Tool calls and content", _HEAD, rows, _NOTE) if rows else []


def tool_calls_html(report: dict[str, Any]) -> str:
    """The HTML section (empty when no variant's requests carried tools)."""
    rows = _rows(report)
    return html_table_section("Tool calls and content", _HEAD, rows, _NOTE) if rows else ""
