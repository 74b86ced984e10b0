"""One report section that is a titled table and a note under it, in Markdown and in HTML: the reasoning, tool-call
and LoRA adapter sections share it (each builds its own rows of text cells)."""

from __future__ import annotations

import html
from collections.abc import Sequence

__all__ = ["html_table_section", "markdown_table_section"]


def markdown_table_section(
    title: str, head: Sequence[str], rows: Sequence[Sequence[str]], note: str, text_columns: int = 1
) -> list[str]:
    """`## title`, the table (its first `text_columns` left-aligned, the rest numbers, right-aligned), the note."""
    return [
        "",
        f"## {title}",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * text_columns + "---:|" * (len(head) - text_columns),
        *("| " + " | ".join(r) + " |" for r in rows),
        "",
        note,
    ]


def html_table_section(title: str, head: Sequence[str], rows: Sequence[Sequence[str]], note: str) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return (
        f"<h2>{html.escape(title)}</h2><table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"
        f"<p class=meta>{html.escape(note)}</p>"
    )
