"""The report's formats, one registry: every writer renders the canonical report JSON (never the aggregate, never
the records), so a report re-rendered next month says what it said on the night it ran.

`csv` is the exception by nature: the report keeps no per-request rows, so it is rendered from the raw shards.
`timeline-csv` is the one sample of requests the report does keep (its request timeline), one row each.
`vllm-bench` renders the report, plus vLLM's per-request lists when raw shards are given (`render_records`); without
them it says the lists are absent.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.registry import Registry

__all__ = ["Format", "formats"]


@dataclass(frozen=True, slots=True)
class Format:
    name: str
    extension: str
    description: str
    # report JSON -> the rendered text; None for formats rendered from raw records (csv)
    render: Callable[[dict[str, Any]], str] | None
    # (report JSON, the raw shards' rows or None when none were given) -> the text: a format that uses the rows
    # where there are any (`loadgen report` reads them only for such a format)
    render_records: Callable[[dict[str, Any], list[dict[str, Any]] | None], str] | None = None


def _json(report: dict[str, Any]) -> str:
    return orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE).decode()


def _markdown(report: dict[str, Any]) -> str:
    from loadgen.report.markdown import render_markdown

    return render_markdown(report)


def _html(report: dict[str, Any]) -> str:
    from loadgen.report.html import render_html

    return render_html(report)


def _junit(report: dict[str, Any]) -> str:
    from loadgen.report.junit import render_junit

    return render_junit(report)


def _timeline_csv(report: dict[str, Any]) -> str:
    from loadgen.report.request_timeline import render_timeline_csv

    return render_timeline_csv(report)


def _vllm_bench(report: dict[str, Any], rows: list[dict[str, Any]] | None = None) -> str:
    from loadgen.report.vllm_bench import render_vllm_bench

    return render_vllm_bench(report, rows)


def formats() -> Registry[Format]:
    """A fresh registry of the formats."""
    registry: Registry[Format] = Registry("report format")
    for fmt in (
        Format("json", "json", "the canonical report (versioned; loadgen/report/report.schema.json)", _json),
        Format("md", "md", "Markdown for a CI log or a PR comment: summary per variant first", _markdown),
        Format("html", "html", "one self-contained HTML file with charts (opens offline)", _html),
        Format("junit", "xml", "JUnit XML: one test case per SLO and one for run trust", _junit),
        Format("csv", "csv", "per-request records, from raw shards (--raw-records DIR)", None),
        Format(
            "timeline-csv",
            "csv",
            "the request timeline's sampled requests (the HTML report's lanes): one row each, times and gaps",
            _timeline_csv,
        ),
        Format(
            "vllm-bench",
            "jsonl",
            "each variant as `vllm bench serve --save-result` writes a run (one JSON object per line; itl = loadgen's "
            "ICL, vLLM's per-chunk gap; --save-detailed's per-request lists from raw shards: --raw-records DIR)",
            _vllm_bench,
            _vllm_bench,
        ),
    ):
        registry.register(fmt.name, fmt)
    return registry
