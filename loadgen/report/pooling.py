"""Pooling variants (embeddings, rerank: `loadgen/protocol/dialects/pooling.py`) in the report: items a second beside
requests a second, since one request carries `items_per_request` inputs (or documents to rank), and a pooling
server's capacity is in items and input tokens, not in generated tokens (it generates none)."""

from __future__ import annotations

from typing import Any

from loadgen.config.variant import Variant
from loadgen.protocol.dialects import POOLING_DIALECTS

__all__ = ["pooling_json", "pooling_lines"]

_WHAT = {"openai-embeddings": "embeddings", "rerank": "rerank", "tei-rerank": "rerank"}


def pooling_json(v: Variant, overall: dict[str, Any]) -> dict[str, Any] | None:
    """`variants[].pooling`: what a request carried and the items served a second over the window; None for a
    generating variant."""
    if v.dialect not in POOLING_DIALECTS:
        return None
    k = v.items_per_request or 1
    rps = overall.get("requests_per_s")
    return {
        "kind": _WHAT[v.dialect],
        "items_per_request": k,
        "items_per_s": None if rps is None else round(rps * k, 4),
        "input_tokens_per_s": overall.get("input_tokens_per_s"),
    }


def pooling_lines(report: dict[str, Any]) -> list[str]:
    """One line per pooling variant for the markdown's run section."""
    lines = []
    for v in report["variants"]:
        p = v.get("pooling")
        if p is None:
            continue
        items = "–" if p["items_per_s"] is None else f"{p['items_per_s']:,.1f}"
        per = "inputs" if p["kind"] == "embeddings" else "documents"
        lines.append(
            f"- {v['name']}: {p['kind']}, {p['items_per_request']} {per} a request — {items} items/s "
            f"({v['overall'].get('requests_per_s')} req/s); E2E only, no tokens generated"
        )
    return lines
