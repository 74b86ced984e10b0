"""The shape of one row of `loadgen compare`'s result, before its figures are filled in (report/compare_gate.py for
latency and throughput, report/compare_cost.py for $/1M tokens)."""

from __future__ import annotations

from typing import Any

__all__ = ["blank_row"]


def blank_row(variant: str, metric: str, kind: str, base: Any = None, new: Any = None) -> dict[str, Any]:
    """No ratio, no interval, no verdict, not a regression: what a row says until the comparison fills it."""
    return {
        "variant": variant, "metric": metric, "kind": kind, "regression": False, "base": base, "new": new,
        "ratio": None, "change": None, "ci_low": None, "ci_high": None, "within_noise": None, "verdict": "",
        "ci_low_censored": False, "ci_high_censored": False,
    }  # fmt: skip
