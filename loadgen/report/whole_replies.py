"""What the reports say about variants whose replies came whole (`variants[].stream: false`, `streamed: false` in
report.json): TTFT, ITL, ICL and TPOT were not measured for them (there is no first token to time, no gap between
tokens), so their tables show no such rows and their summary cells say so, rather than a zero or a blank that reads
as "no data"."""

from __future__ import annotations

from html import escape
from typing import Any

__all__ = ["NOT_MEASURED", "whole_reply_html", "whole_reply_lines", "whole_reply_variants"]

# A summary cell of a metric the variant did not measure.
NOT_MEASURED = "not measured"
_WHY = (
    "TTFT, ITL, ICL and TPOT not measured: each reply arrived whole (`stream: false`), so there is no first token "
    "or gap between tokens to time; E2E, requests/s and the output tokens of the replies' usage are measured. Its "
    "comparison with the baseline is on E2E only, and SLOs on TTFT, ITL or TPOT are judged on the streamed variants."
)


def whole_reply_variants(report: dict[str, Any]) -> list[str]:
    """The names of the report's variants whose replies came whole."""
    return [v["name"] for v in report["variants"] if v.get("streamed") is False]


def whole_reply_lines(report: dict[str, Any]) -> list[str]:
    """The Markdown report's note (none when every variant streamed)."""
    names = whole_reply_variants(report)
    return [f"Whole replies ({', '.join(names)}): {_WHY}"] if names else []


def whole_reply_html(report: dict[str, Any]) -> str:
    """The HTML report's note under its summary ("" when every variant streamed)."""
    names = whole_reply_variants(report)
    if not names:
        return ""
    return f"<p class=note>Whole replies ({escape(', '.join(names))}): {escape(_WHY).replace('`', '')}</p>"
