"""Cost at the knee, in a sweep (sweep.json's `variants[].usd_per_1m_output_tokens_at_knee` and `cost`): per variant,
$ per 1M output tokens at its knee (the step at the highest load that met every SLO before the first that did not,
from that step's report), and the cheapest variant that meets the SLOs at a required load.

With `--required-rate R` (rate sweeps) a variant qualifies when its knee is at least R, and what it costs at R is
its $ / 1M output tokens at its lowest passing step at or above R: the step measured nearest to serving R (the
price per hour is fixed, so per token a variant is cheapest at its knee, and dearer at lighter loads). Without
it, the variants with a knee are ranked by their cost at the knee. A variant that declares no cost takes no part.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["at_knee", "cheapest_variant", "step_cost", "sweep_cost_lines"]


def step_cost(report: dict[str, Any]) -> dict[str, Any]:
    """The cost and energy figures a step row keeps from its report (the sweep runs one variant per step)."""
    ce = report["variants"][0].get("cost_energy") or {}
    cost, energy = ce.get("cost") or {}, ce.get("energy") or {}
    return {
        "usd_per_1m_output_tokens": cost.get("usd_per_1m_output_tokens"),
        "usd_per_1m_good_tokens": cost.get("usd_per_1m_good_tokens"),
        "joules_per_output_token": energy.get("joules_per_output_token"),
    }


def _level(step: Mapping[str, Any]) -> float:
    return float(step["concurrency"] if "concurrency" in step else step["requested_rate_per_s"])


def at_knee(steps: Sequence[Mapping[str, Any]], knee: float | None) -> float | None:
    """$ / 1M output tokens of the passing step at the knee (None: no knee, or no cost there)."""
    if knee is None:
        return None
    found = [s.get("usd_per_1m_output_tokens") for s in steps if s.get("passed") and _level(s) == knee]
    return next((x for x in found if x is not None), None)


def _at_required(steps: Sequence[Mapping[str, Any]], knee: float | None, required: float) -> float | None:
    if knee is None or knee < required:
        return None
    passing = sorted(
        (s for s in steps if s.get("passed") and required <= _level(s) <= knee and s.get("usd_per_1m_output_tokens")),
        key=_level,
    )
    return passing[0]["usd_per_1m_output_tokens"] if passing else None


def cheapest_variant(variants: Sequence[Mapping[str, Any]], knee_key: str, required: float | None) -> dict[str, Any]:
    """sweep.json's `cost`: each variant's $ / 1M output tokens at the required load (or at its knee) and the
    cheapest of those that meet the SLOs there."""
    costs: dict[str, float | None] = {}
    for v in variants:
        knee = v.get(knee_key)
        costs[v["name"]] = (
            v.get("usd_per_1m_output_tokens_at_knee") if required is None else _at_required(v["steps"], knee, required)
        )
    ranked = sorted((c, name) for name, c in costs.items() if c is not None)
    return {
        "required_rate_per_s": required,
        "usd_per_1m_output_tokens": costs,
        "cheapest": ranked[0][1] if ranked else None,
        "basis": "at its knee"
        if required is None
        else "at its lowest passing step at or above the required rate (its knee at least that rate)",
    }


def sweep_cost_lines(doc: dict[str, Any]) -> list[str]:
    """sweep.md's "Cost at the knee" (none when no variant declares a cost)."""
    cost = doc.get("cost")
    if not cost or not any(v.get("usd_per_1m_output_tokens_at_knee") is not None for v in doc["variants"]):
        return []
    required = cost.get("required_rate_per_s")
    where = "at its knee" if required is None else f"to serve {required:g} req/s meeting every SLO"
    lines = [
        "",
        "## Cost at the knee",
        "",
        "| variant | $ / 1M output tok at the knee | $ / 1M output tok " + where + " |",
    ]
    lines.append("|---|---:|---:|")
    for v in doc["variants"]:
        knee_cost = v.get("usd_per_1m_output_tokens_at_knee")
        there = cost["usd_per_1m_output_tokens"].get(v["name"])
        cells = ["–" if x is None else f"{x:,.4f}" for x in (knee_cost, there)]
        lines.append(f"| {v['name']} | {cells[0]} | {cells[1]} |")
    cheapest = cost.get("cheapest")
    lines += [
        "",
        f"Cheapest {where}: **{cheapest}**." if cheapest else f"No variant with a cost meets every SLO {where}.",
    ]
    return lines
