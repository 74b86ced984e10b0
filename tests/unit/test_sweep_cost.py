"""Cost at the knee in a rate sweep (report/sweep_cost.py), on step reports whose throughput and prices are known: each
variant's $ / 1M output tokens at its knee, and the cheapest variant that meets the SLOs at its knee or at a
required rate (a dear variant that holds a rate the cheap one cannot is the answer there)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.cli import main
from loadgen.config.cost import VariantCost
from loadgen.report.cost import cost_json
from loadgen.report.sweep import render_sweep_markdown, step_row, sweep_json

WINDOW_S = 3600.0


def _report(rate: float, usd_per_hour: float, passed: bool) -> dict[str, Any]:
    """A step at `rate` req/s of 40 output tokens each, over an hour, at the given price."""
    tokens = int(40 * rate * WINDOW_S)
    cost = cost_json(VariantCost(usd_per_hour=usd_per_hour), WINDOW_S, tokens, None)
    overall = {"requests": 1, "success_rate": 1.0, "requests_per_s": rate, "output_tokens_per_s": 40 * rate}
    return {
        "run": {"trustworthy": True, "untrustworthy_reasons": []},
        "slos_passed": passed,
        "slos": [{"slo": "ttft p99 ≤ 500 ms", "passed": passed}],
        "variants": [
            {
                "name": "v",
                "overall": overall | {"metrics_ms": {}},
                "open_loop": {"achieved_rate_per_s": rate, "sent": 100, "dropped": 0, "unsent_at_stop": 0},
                "cost_energy": {"cost": cost, "energy": None},
            }
        ],
    }


def _curves() -> dict[str, list[dict[str, Any]]]:
    # big: $8/h, passes 2, 4 and 8 req/s (knee 8). small: $2/h, passes 2 and 4, fails 8 (knee 4).
    big = [step_row(r, _report(r, 8.0, True), "r", 0) for r in (2.0, 4.0, 8.0)]
    small = [step_row(r, _report(r, 2.0, r < 8), "r", 0 if r < 8 else 1) for r in (2.0, 4.0, 8.0)]
    return {"big": big, "small": small}


PLAN = {"by": "rate", "kind": "rates", "spec": "2,4,8", "arrival": "poisson"}


def test_each_variant_costs_its_knee_steps_price_and_the_cheapest_is_named() -> None:
    doc = sweep_json("s", PLAN, 10.0, _curves())
    big, small = doc["variants"]
    # $/1M = $/h ÷ (tokens/s · 3600) · 10⁶: big at 8 req/s (320 tok/s) 6.944444, small at 4 (160 tok/s) 3.472222.
    assert big["knee_rate_per_s"] == 8.0 and big["usd_per_1m_output_tokens_at_knee"] == 6.944444
    assert small["knee_rate_per_s"] == 4.0 and small["usd_per_1m_output_tokens_at_knee"] == 3.472222
    assert big["steps"][0]["usd_per_1m_output_tokens"] == 27.777778  # 2 req/s: the same $/h over a quarter of it
    assert doc["cost"]["cheapest"] == "small" and doc["cost"]["required_rate_per_s"] is None
    md = render_sweep_markdown(doc)
    assert "## Cost at the knee" in md and "| small | 3.4722 | 3.4722 |" in md
    assert "Cheapest at its knee: **small**." in md


def test_a_required_rate_the_cheap_variant_cannot_meet_names_the_dear_one() -> None:
    at6 = sweep_json("s", PLAN, 10.0, _curves(), required_rate=6.0)["cost"]
    # small's knee (4) is below 6; big serves 6 at its step of 8 req/s.
    assert at6["usd_per_1m_output_tokens"] == {"big": 6.944444, "small": None} and at6["cheapest"] == "big"
    at3 = sweep_json("s", PLAN, 10.0, _curves(), required_rate=3.0)["cost"]
    assert at3["usd_per_1m_output_tokens"] == {"big": 13.888889, "small": 3.472222} and at3["cheapest"] == "small"
    at9 = sweep_json("s", PLAN, 10.0, _curves(), required_rate=9.0)
    assert at9["cost"]["cheapest"] is None
    assert "No variant with a cost meets every SLO to serve 9 req/s" in render_sweep_markdown(at9)


def test_without_costs_there_is_no_cost_section() -> None:
    report = _report(2.0, 1.0, True)
    report["variants"][0].pop("cost_energy")
    rows = [step_row(2.0, report, "r", 0)]
    assert rows[0]["usd_per_1m_output_tokens"] is None
    doc = sweep_json("s", PLAN, 10.0, {"a": rows})
    assert doc["variants"][0]["usd_per_1m_output_tokens_at_knee"] is None and doc["cost"]["cheapest"] is None
    assert "Cost at the knee" not in render_sweep_markdown(doc)


def test_required_rate_is_for_rate_sweeps(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text('variants:\n  - {name: a, base_url: "http://127.0.0.1:1", model: m, cost: {usd_per_hour: 1}}\n')
    assert main(["sweep", str(path), "--concurrency", "1,2", "--required-rate", "3"]) == 2
    assert "--required-rate" in capsys.readouterr().err
