"""Speed, quality and cost side by side: one row per variant, right under the summary, for the choice the report
is for (a quantisation, speculative decoding, another engine or GPU). Each cell is a figure the report already holds,
in its own section's words: the comparison's E2E p50 speedup with its interval (`comparison`), the agreement of the
variant's greedy replies with the baseline's on the first k tokens (`quality`), and $ per 1M output tokens
(`variants[].cost_energy`). Shown when there is a baseline to compare with and the scenario asked for quality or
declared a cost; otherwise the summary's speed figures are all there is to show."""

from __future__ import annotations

import html
from typing import Any

from loadgen.report.numbers import AS_SET, CENSORED, MISSING, counted, percent, percent_ci, usd

__all__ = ["decision_html", "decision_markdown_lines", "decision_rows"]

_HEAD = ("variant", "speed: E2E p50 speedup (95 % CI)", "quality: agreement (95 % CI)", "cost: $ / 1M output tok")


def _speed(report: dict[str, Any], name: str) -> str:
    if name == report.get("baseline"):
        return "1.00× (baseline)"
    e = next(
        (e for e in report.get("comparison") or [] if (e["variant"], e["metric"], e["stat"]) == (name, "e2e", "p50")),
        None,
    )
    if e is None:
        return MISSING
    if e.get("censored"):
        return CENSORED
    if e.get("speedup") is None:
        return MISSING
    low = CENSORED if e.get("ci_low_censored") else e.get("ci_low")
    high = CENSORED if e.get("ci_high_censored") else e.get("ci_high")
    bounds = [b if isinstance(b, str) else f"{b:.2f}" for b in (low, high) if b is not None]
    text = f"{e['speedup']:.2f}×" + (f" ({'–'.join(bounds)})" if len(bounds) == 2 else "")
    if e.get("within_noise") is None:  # too few requests above the statistic to judge its interval
        return text + f", no verdict ({counted(e.get('tail_n', 0), 'request')} above it)"
    return text + (", within noise" if e["within_noise"] else "")


def _quality(report: dict[str, Any], name: str) -> str:
    q = report.get("quality")
    if not q:
        return MISSING
    if name == report.get("baseline"):
        return "baseline"
    e = next((e for e in q["entries"] if e["variant"] == name and e["mix"] == "*"), None)
    if e is None:
        return "no pairs"
    a = e["agreement"]
    return f"{percent_ci(a['value'], a['ci_low'], a['ci_high'])}, {counted(e['pairs'], 'pair')}"


def _cost(v: dict[str, Any]) -> str:
    cost = (v.get("cost_energy") or {}).get("cost") or {}
    return usd(cost.get("usd_per_1m_output_tokens")) if cost else MISSING


def decision_rows(report: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(variant, speed, quality, cost) per variant; [] when there is nothing beside speed to put there."""
    variants = report["variants"]
    costs = any((v.get("cost_energy") or {}).get("cost") for v in variants)
    if len(variants) < 2 or not report.get("baseline") or not (report.get("quality") or costs):
        return []
    return [(v["name"], _speed(report, v["name"]), _quality(report, v["name"]), _cost(v)) for v in variants]


def _note(report: dict[str, Any]) -> str:
    q = report.get("quality")
    quality = (
        f"Quality: the share of the first {counted(q['method']['first_k'], 'token')} of each greedy reply that are "
        "the baseline's, over the requests both answered. "
        if q
        else "Quality: not measured (`quality:` is not set). "
    )
    confidence = percent((report.get("comparison_method") or {}).get("confidence", 0.95), AS_SET)
    return (
        f"Speed: E2E p50, baseline ÷ variant (> 1 is faster), with its {confidence} interval. "
        + quality
        + "Cost: the variant's declared price per hour over its output tokens in the window (– : no `cost:`). "
        "Each has its own section below."
    )


def decision_markdown_lines(report: dict[str, Any]) -> list[str]:
    rows = decision_rows(report)
    if not rows:
        return []
    lines = ["", "## Speed, quality and cost", "", "| " + " | ".join(_HEAD) + " |", "|---|---:|---:|---:|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return [*lines, "", _note(report)]


def decision_html(report: dict[str, Any]) -> str:
    rows = decision_rows(report)
    if not rows:
        return ""
    e_ = html.escape
    head = "<tr>" + "".join(f"<th{' class=text' if i == 0 else ''}>{e_(h)}</th>" for i, h in enumerate(_HEAD))
    body = "".join(
        f"<tr><td class=text>{e_(name)}</td>" + "".join(f"<td>{e_(c)}</td>" for c in cells) + "</tr>"
        for name, *cells in rows
    )
    return f"<h2>Speed, quality and cost</h2><table>{head}</tr>{body}</table><p class=note>{e_(_note(report))}</p>"
