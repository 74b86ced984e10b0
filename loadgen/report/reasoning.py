"""A reasoning model's thinking and answer, measured apart (measure/reasoning.py): the report's
`variants[].reasoning` (per variant and per mix), and its Markdown and HTML section. Absent when no request of the
variant had reasoning.
"""

from __future__ import annotations

from typing import Any

from loadgen.measure.aggregate import GroupStats
from loadgen.measure.reasoning import REASONING_METRICS
from loadgen.report.numbers import SHARE, percent, stat_ms
from loadgen.report.table_section import html_table_section, markdown_table_section

__all__ = ["reasoning_html", "reasoning_json", "reasoning_lines"]

_HEAD = (
    "variant",
    "requests with reasoning",
    "reasoning tokens (mean)",
    "answer tokens (mean)",
    "reasoning share",
    "TTFT p50 ms",
    "first reasoning p50 ms",
    "first answer p50 ms",
    "TPOT reasoning p50 ms",
    "TPOT answer p50 ms",
)
_NOTE = (
    "Per successful request with reasoning (chunks of delta.reasoning_content / delta.reasoning before the answer's "
    "delta.content, or reasoning tokens in the server's usage): the time from the request write to its first "
    "reasoning and first answer token (TTFT is the first token of either kind), the tokens of each phase (the "
    "server's completion_tokens_details.reasoning_tokens when its usage has them, else the chunks' counts), and "
    "each phase's TPOT: (its last chunk − its first) ÷ (its tokens − its first chunk's). – : no such time (thinking "
    "not streamed, or one chunk in the phase)."
)


def _group(g: GroupStats) -> dict[str, Any] | None:
    counts = g.reasoning
    n = counts.get("requests", 0)
    if not n:
        return None
    r, a = counts.get("reasoning_tokens", 0), counts.get("answer_tokens", 0)
    out: dict[str, Any] = {
        "requests": n,
        "ok": g.ok,
        "reasoning_tokens": r,
        "answer_tokens": a,
        "reasoning_tokens_mean": round(r / n, 2),
        "answer_tokens_mean": round(a / n, 2),
        "reasoning_share": round(r / (r + a), 4) if r + a else None,
        "counted_by_server": counts.get("counted_by_server", 0),
    }
    for metric in REASONING_METRICS:
        h = g.hists.get(metric)
        out[f"{metric}_ms"] = h.summary_ms() if h is not None and h.count else None
    return out


def reasoning_json(merged: GroupStats, mixes: dict[str, GroupStats]) -> dict[str, Any] | None:
    """The variant's phases over all its mixes, and per mix (only mixes with reasoning); None without any."""
    out = _group(merged)
    if out is None:
        return None
    out["mixes"] = {m: x for m, g in sorted(mixes.items()) if (x := _group(g)) is not None}
    return out


def _rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for v in report["variants"]:
        x = v.get("reasoning")
        if x is None:
            continue
        rows.append(
            [
                v["name"],
                f"{x['requests']} of {x['ok']}",
                f"{x['reasoning_tokens_mean']:.1f}",
                f"{x['answer_tokens_mean']:.1f}",
                percent(x["reasoning_share"], SHARE),
                stat_ms(v["overall"]["metrics_ms"].get("ttft"), "p50"),
                *(stat_ms(x[f"{m}_ms"], "p50") for m in REASONING_METRICS),
            ]
        )
    return rows


def reasoning_lines(report: dict[str, Any]) -> list[str]:
    """The Markdown section (no lines when no variant had reasoning)."""
    rows = _rows(report)
    return markdown_table_section("Reasoning and answer", _HEAD, rows, _NOTE) if rows else []


def reasoning_html(report: dict[str, Any]) -> str:
    """The HTML section (empty when no variant had reasoning)."""
    rows = _rows(report)
    return html_table_section("Reasoning and answer", _HEAD, rows, _NOTE) if rows else ""
