"""Cost at the knee, in a sweep (sweep.json's `variants[].usd_per_1m_output_tokens_at_knee` and `cost`): per variant,
$ per 1M output tokens at its knee (the step at the highest load that met every SLO before the first that did not,
from that step's report), and the cheapest variant that meets the SLOs at a required load.

With `--required-rate R` (rate sweeps) every variant with a knee and a price is priced at R itself:

- **Replicas.** A deployment as swept serves up to its knee; R above it takes `n = ceil(R / knee)` replicas of it,
  each given R / n (the load balanced evenly), and costs n times its price per hour (n times its GPUs). At or below
  the knee, n = 1.
- **Between the steps.** Its output tokens/s at the rate each replica serves, r = R / n, interpolated linearly
  between the passing steps around r (below the lowest step, between no load — 0 tokens/s at 0 req/s — and that
  step), never read off a higher step: a step above r is busier, so its tokens are cheaper than r's.
- **Price.** $ / 1M output tokens = n × $/h ÷ (n × tokens/s at r × 3600) × 10⁶; `serving` keeps n, r, the GPUs, the
  $/h for the whole of R and the two steps interpolated between.

The cheapest is the lowest $ / 1M output tokens at R. Without `--required-rate`, the variants with a knee are ranked
by their cost at the knee. A variant that declares no cost takes no part.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["at_knee", "cheapest_variant", "serving_cost", "step_cost", "sweep_cost_lines"]


def step_cost(report: dict[str, Any]) -> dict[str, Any]:
    """The cost and energy figures a step row keeps from its report (the sweep runs one variant per step): its
    price per hour and GPUs too, which pricing a required rate scales by replicas."""
    ce = report["variants"][0].get("cost_energy") or {}
    cost, energy = ce.get("cost") or {}, ce.get("energy") or {}
    return {
        "usd_per_hour": cost.get("usd_per_hour"),
        "gpus": cost.get("gpus"),
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


def _tokens_at(points: Sequence[tuple[float, float]], rate: float) -> tuple[float, float, float] | None:
    """(output tokens/s at `rate`, the level below, the level above), linear between the points around it; the
    points are (level, tokens/s), sorted, and start at no load (0, 0)."""
    for (lo, t_lo), (hi, t_hi) in zip(points, points[1:], strict=False):
        if lo <= rate <= hi:
            t = t_lo if hi == lo else t_lo + (t_hi - t_lo) * (rate - lo) / (hi - lo)
            return t, lo, hi
    return None


def serving_cost(steps: Sequence[Mapping[str, Any]], knee: float | None, required: float) -> dict[str, Any] | None:
    """What serving `required` req/s with this variant costs (module docstring), None without a knee or a price."""
    if knee is None or knee <= 0:
        return None
    passing = [
        s
        for s in steps
        if s.get("passed") and _level(s) <= knee and s.get("usd_per_hour") and (s.get("output_tokens_per_s") or 0) > 0
    ]
    if not passing:
        return None
    replicas = max(1, math.ceil(required / knee - 1e-9))  # (a hair of float error is no extra replica)
    rate = required / replicas  # what each replica serves: at most the knee
    points = [(0.0, 0.0), *sorted((_level(s), float(s["output_tokens_per_s"])) for s in passing)]
    found = _tokens_at(points, rate)
    if found is None or found[0] <= 0:
        return None
    tokens_per_s, lo, hi = found
    hourly = float(passing[-1]["usd_per_hour"])
    gpus = passing[-1].get("gpus")
    return {
        "replicas": replicas,
        "rate_per_replica_per_s": round(rate, 6),
        "gpus": None if gpus is None else replicas * int(gpus),
        "usd_per_hour": round(replicas * hourly, 6),
        "output_tokens_per_s": round(replicas * tokens_per_s, 4),
        "usd_per_1m_output_tokens": round(hourly / (tokens_per_s * 3600.0) * 1e6, 6),
        "between_steps": [lo, hi],
    }


def cheapest_variant(variants: Sequence[Mapping[str, Any]], knee_key: str, required: float | None) -> dict[str, Any]:
    """sweep.json's `cost`: each variant's $ / 1M output tokens at the required load (or at its knee) and the
    cheapest of those that meet the SLOs there."""
    costs: dict[str, float | None] = {}
    serving: dict[str, dict[str, Any] | None] = {}
    for v in variants:
        if required is None:
            costs[v["name"]] = v.get("usd_per_1m_output_tokens_at_knee")
        else:
            serving[v["name"]] = there = serving_cost(v["steps"], v.get(knee_key), required)
            costs[v["name"]] = None if there is None else there["usd_per_1m_output_tokens"]
    ranked = sorted((c, name) for name, c in costs.items() if c is not None)
    out: dict[str, Any] = {
        "required_rate_per_s": required,
        "usd_per_1m_output_tokens": costs,
        "cheapest": ranked[0][1] if ranked else None,
        "basis": "at its knee"
        if required is None
        else "at the required rate: output tokens/s interpolated between the passing steps around the rate each "
        "replica serves, with as many replicas (each its price per hour and GPUs) as its knee needs for the rate",
    }
    if required is not None:
        out["serving"] = serving
    return out


def sweep_cost_lines(doc: dict[str, Any]) -> list[str]:
    """sweep.md's "Cost at the knee" (none when no variant declares a cost)."""
    cost = doc.get("cost")
    if not cost or not any(v.get("usd_per_1m_output_tokens_at_knee") is not None for v in doc["variants"]):
        return []
    required = cost.get("required_rate_per_s")
    where = "at its knee" if required is None else f"to serve {required:g} req/s meeting every SLO"
    serving = cost.get("serving") or {}
    head = "| variant | $ / 1M output tok at the knee | $ / 1M output tok " + where + " |"
    lines = ["", "## Cost at the knee", "", head + (" replicas | $ / h |" if required is not None else "")]
    lines.append("|---|---:|---:|" + ("---:|---:|" if required is not None else ""))
    for v in doc["variants"]:
        knee_cost = v.get("usd_per_1m_output_tokens_at_knee")
        there = cost["usd_per_1m_output_tokens"].get(v["name"])
        cells = ["–" if x is None else f"{x:,.4f}" for x in (knee_cost, there)]
        if required is not None:
            s = serving.get(v["name"])
            cells += ["–", "–"] if s is None else [_replicas_cell(s), f"{s['usd_per_hour']:,.2f}"]
        lines.append(f"| {v['name']} | " + " | ".join(cells) + " |")
    cheapest = cost.get("cheapest")
    lines += [
        "",
        f"Cheapest {where}: **{cheapest}**." if cheapest else f"No variant with a cost meets every SLO {where}.",
    ]
    if required is not None:
        lines.append(
            "Each variant is priced at the rate itself: its output tokens/s interpolated between the passing steps "
            "around the rate each replica serves, and as many replicas as its knee needs (the load balanced evenly), "
            "each at its price per hour."
        )
    return lines


def _replicas_cell(s: Mapping[str, Any]) -> str:
    gpus = f", {s['gpus']} GPUs" if s.get("gpus") is not None else ""
    return f"{s['replicas']} × {s['rate_per_replica_per_s']:g} req/s{gpus}"
