"""`loadgen compare`'s gate on cost: $ per 1M output tokens of each variant that declares a cost, NEW vs BASE.

$ / 1M tokens is usd_per_hour ÷ output tokens per hour, so NEW ÷ BASE of it is (NEW's price ÷ BASE's) ÷ (NEW's
output tokens/s ÷ BASE's): its interval is the output-throughput row's interval (compare_gate.py's block bootstrap
of the timelines) inverted and scaled by the ratio of the prices, which are declared, not measured. Lower is
better: a rise by more than --max-regression whose interval excludes no change is a regression; a cost BASE had
and NEW has not (no output token, or no cost declared) is one too, as a throughput BASE measured and NEW did not.
"""

from __future__ import annotations

from typing import Any

from loadgen.report.compare_rows import blank_row

__all__ = ["COST_METRIC", "cost_row"]

COST_METRIC = "usd_per_1m_output_tokens"


def _cost(variant: dict[str, Any]) -> tuple[float | None, float | None]:
    """(usd_per_1m_output_tokens, usd_per_hour) of a report's variant (None: not declared or no token)."""
    cost = (variant.get("cost_energy") or {}).get("cost") or {}
    return cost.get(COST_METRIC), cost.get("usd_per_hour")


def cost_row(name: str, b: dict[str, Any], n: dict[str, Any], tokens_row: dict[str, Any]) -> dict[str, Any] | None:
    """The cost row of variant `name` (None when BASE declares no cost), from its output-tokens/s row
    `tokens_row`; the caller gives it its verdict (lower is better)."""
    cb, price_b = _cost(b)
    cn, price_n = _cost(n)
    if cb is None and price_b is None:
        return None
    row = blank_row(name, COST_METRIC, "cost", cb, cn)
    if not cb:
        row["verdict"] = "none in BASE (no output token)"
    elif cn is None:
        row |= {"verdict": "missing in NEW", "regression": True}
    else:
        point = cn / cb
        row |= {"ratio": round(point, 4), "change": round(point - 1, 4)}
        lo, hi = tokens_row.get("ci_low"), tokens_row.get("ci_high")
        if lo and hi and price_b and price_n:
            prices = price_n / price_b
            row |= {"ci_low": round(prices / hi, 4), "ci_high": round(prices / lo, 4)}
            row["within_noise"] = row["ci_low"] <= 1.0 <= row["ci_high"]
    return row
