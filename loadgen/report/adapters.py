"""Results per LoRA adapter (`variants[].adapters`): the report's `variants[].adapters`, one group per adapter the
variant lists (every metric, censored alike, as a mix's or a priority class's), and its Markdown and HTML section.
Absent for a variant without adapters: its requests all named its `model`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from loadgen.config.variant import Variant
from loadgen.measure.aggregate import GroupStats
from loadgen.report.numbers import SHARE, TOK_PER_S, figure, percent, stat_ms
from loadgen.report.table_section import html_table_section, markdown_table_section

__all__ = ["adapter_html", "adapter_lines", "adapters_json"]

_HEAD = (
    "variant",
    "adapter",
    "requests",
    "share (asked)",
    "ok",
    "success",
    "TTFT p50",
    "TTFT p99",
    "TPOT p50",
    "TPOT p99",
    "E2E p50",
    "E2E p99",
    "output tok/s",
)
_NOTE = (
    "Each request's adapter (its `model`) is drawn by share from its identity apart from its prompt and lengths, so "
    "the adapters see the same traffic, and a variant listing the same adapters sends each request to the same one. "
    "A multi-LoRA server (vLLM `--enable-lora --lora-modules name=path`) loads an adapter on its first request and "
    "again after evicting it (`--max-loras` at once): that shows in the adapter's TTFT p99. The variant's own model "
    "among them is the base model."
)


def adapters_json(
    v: Variant,
    adapters: Mapping[tuple[str, str], GroupStats],
    merged: GroupStats,
    group_json: Callable[[GroupStats], dict[str, Any]],
) -> dict[str, Any] | None:
    """Each adapter of variant `v`, in its order, as a group of its own (`group_json`: the report's rendering of a
    group) plus its share of the variant's requests in the window beside the share asked for, and whether it is
    the base model. None for a variant without adapters."""
    if not v.adapters:
        return None
    asked = sum(a.share for a in v.adapters)
    out: dict[str, Any] = {}
    for a in v.adapters:
        g = adapters.get((v.name, a.name)) or GroupStats()
        out[a.name] = {
            **group_json(g),
            "share": round(g.requests / merged.requests, 4) if merged.requests else None,
            "configured_share": round(a.share / asked, 4),
            "base": a.name == v.model,
        }
    return out


def _rows(report: dict[str, Any]) -> list[list[str]]:
    rows = []
    for v in report["variants"]:
        for name, a in (v.get("adapters") or {}).items():
            m = a["metrics_ms"]
            t, p, e = m.get("ttft"), m.get("tpot"), m.get("e2e")
            rows.append(
                [
                    v["name"],
                    name + (" (base)" if a["base"] else ""),
                    f"{a['requests']:,}",
                    f"{percent(a['share'], SHARE)} ({percent(a['configured_share'], SHARE)})",
                    f"{a['ok']:,}",
                    percent(a["success_rate"]),
                    *(stat_ms(s, k) for s in (t, p, e) for k in ("p50", "p99")),
                    figure(a["output_tokens_per_s"], TOK_PER_S),
                ]
            )
    return rows


def adapter_lines(report: dict[str, Any]) -> list[str]:
    """The Markdown section (no lines when no variant has adapters)."""
    rows = _rows(report)
    return markdown_table_section("LoRA adapters (ms)", _HEAD, rows, _NOTE, text_columns=2) if rows else []


def adapter_html(report: dict[str, Any]) -> str:
    """The HTML section (empty when no variant has adapters)."""
    rows = _rows(report)
    return html_table_section("LoRA adapters (ms)", _HEAD, rows, _NOTE.replace("`", "")) if rows else ""
