"""report.html's "Cost and energy" table and its two bar charts: the figures of `variants[].cost_energy`
(report/cost.py says how each is computed), one row (one bar) per variant that declares a cost, a power or a
GPU-memory query."""

from __future__ import annotations

import html
from typing import Any

from loadgen.report.numbers import SHARE, USD_PER_HOUR, percent, usd

__all__ = ["cost_charts", "render_cost_html"]

_HEAD = (
    "variant",
    "$/h",
    "$ / 1M output tok",
    "$ / 1M good tok",
    "J / output tok",
    "output tok / J",
    "mean W",
    "GPU mem max (GiB)",
    "GPU mem mean (GiB)",
    "KV cache max",
)


def _num(x: Any, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def render_cost_html(report: dict[str, Any]) -> str:
    """The section (empty when no variant has a `cost_energy`)."""
    rows = []
    notes = []
    for v in report["variants"]:
        ce = v.get("cost_energy")
        if not ce:
            continue
        cost, energy, mem, kv = ce.get("cost") or {}, ce.get("energy") or {}, ce.get("gpu_memory") or {}, ce.get("kv")
        cells = [
            usd(cost.get("usd_per_hour"), USD_PER_HOUR),
            usd(cost.get("usd_per_1m_output_tokens")),
            usd(cost.get("usd_per_1m_good_tokens")),
            _num(energy.get("joules_per_output_token"), ",.4f"),
            _num(energy.get("output_tokens_per_joule"), ",.3f"),
            _num(energy.get("mean_watts"), ",.1f"),
            _num(mem.get("max_gib"), ",.2f"),
            _num(mem.get("mean_gib"), ",.2f"),
            "–" if not kv else percent(kv["max"], SHARE),
        ]
        name = html.escape(v["name"])
        rows.append(f"<tr><td class=text>{name}</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        for what, part in (("power", energy), ("GPU memory", mem)):
            if part.get("note"):
                notes.append(f"<li>{name}: {what}: {html.escape(part['note'])}</li>")
    if not rows:
        return ""
    head = "<tr>" + "".join(f"<th{' class=text' if i == 0 else ''}>{h}</th>" for i, h in enumerate(_HEAD)) + "</tr>"
    return (
        "<h2>Cost and energy</h2><p>Over the measured window: $ / 1M tokens is the variant's price per hour over its "
        "output tokens per hour (good tokens: those of requests that met every per-request SLO); energy integrates "
        f"its power query's samples (trapezoids) over the window.</p><table>{head}{''.join(rows)}</table>"
        + (f"<ul>{''.join(notes)}</ul>" if notes else "")
    )


def _bars(rows: list[tuple[str, dict[str, Any]]], series: list[tuple[str, str, str]], y_title: str) -> dict[str, Any]:
    """A Chart.js bar chart: one group per variant, one bar per (label, section, key) series that has a value."""
    colours = ("#4e79a7", "#59a14f", "#f28e2b")
    datasets = [
        {"label": label, "data": [(ce.get(part) or {}).get(key) for _, ce in rows], "backgroundColor": colours[i]}
        for i, (label, part, key) in enumerate(series)
        if any((ce.get(part) or {}).get(key) is not None for _, ce in rows)
    ]
    return {
        "type": "bar",
        "data": {"labels": [name for name, _ in rows], "datasets": datasets},
        "options": {"scales": {"y": {"beginAtZero": True, "title": {"display": True, "text": y_title}}}},
    }


def cost_charts(report: dict[str, Any]) -> list[dict[str, Any]]:
    """$ per 1M output (and good) tokens, and joules per output token, per variant; each only when a variant has it."""
    rows = [(v["name"], v["cost_energy"]) for v in report["variants"] if v.get("cost_energy")]
    charts = []
    if any((ce.get("cost") or {}).get("usd_per_1m_output_tokens") is not None for _, ce in rows):
        series = [("per 1M output tokens", "cost", "usd_per_1m_output_tokens")]
        series.append(("per 1M good tokens", "cost", "usd_per_1m_good_tokens"))
        note = "The variant's price per hour over its output tokens per hour in the measured window."
        config = _bars(rows, series, "US dollars")
        charts.append({"id": "cost-per-token", "title": "$ per 1M tokens", "note": note, "config": config})
    if any((ce.get("energy") or {}).get("joules_per_output_token") is not None for _, ce in rows):
        note = "Its power query integrated over the measured window (trapezoids), over its output tokens."
        config = _bars(rows, [("joules per output token", "energy", "joules_per_output_token")], "joules")
        charts.append({"id": "energy-per-token", "title": "Energy per output token", "note": note, "config": config})
    return charts
