"""Cost at the knee in a rate sweep (report/sweep_cost.py), on step reports whose throughput and prices are known: each
variant's $ / 1M output tokens at its knee, and the cheapest variant that meets the SLOs at its knee or at a
required rate — priced at that rate (tokens/s interpolated between the steps around it, never a higher step's) with
the replicas it needs there (each its price per hour and GPUs). Every expectation is worked out by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.cli import main
from loadgen.config.cost import VariantCost
from loadgen.report.cost import cost_json
from loadgen.report.sweep import render_sweep_markdown, step_row, sweep_json

WINDOW_S = 3600.0


def _report(rate: float, usd_per_hour: float, passed: bool, gpus: int | None = None) -> dict[str, Any]:
    """A step at `rate` req/s of 40 output tokens each, over an hour, at the given price (per GPU with `gpus`)."""
    tokens = int(40 * rate * WINDOW_S)
    price = VariantCost(usd_per_hour=usd_per_hour) if gpus is None else VariantCost(usd_per_gpu_hour=1.0, gpus=gpus)
    cost = cost_json(price, WINDOW_S, tokens, None)
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


def test_a_required_rate_is_priced_between_the_steps_around_it_never_at_a_higher_one() -> None:
    # big at 3 req/s: between its steps 2 (80 tok/s) and 4 (160): 120 tok/s, $8/h ÷ (120 × 3600) × 10⁶ = 18.518519
    # (its step at 4 req/s would say 13.888889). small the same 120 tok/s at $2/h: 4.62963.
    at3 = sweep_json("s", PLAN, 10.0, _curves(), required_rate=3.0)["cost"]
    assert at3["usd_per_1m_output_tokens"] == {"big": 18.518519, "small": 4.62963} and at3["cheapest"] == "small"
    assert at3["serving"]["big"] == {
        "replicas": 1,
        "rate_per_replica_per_s": 3.0,
        "gpus": None,
        "usd_per_hour": 8.0,
        "output_tokens_per_s": 120.0,
        "usd_per_1m_output_tokens": 18.518519,
        "between_steps": [2.0, 4.0],
    }
    # Below the lowest step: between no load and it. 1 req/s is 40 tok/s: big $8/h ÷ (40 × 3600) × 10⁶ = 55.555556.
    at1 = sweep_json("s", PLAN, 10.0, _curves(), required_rate=1.0)["cost"]
    assert at1["usd_per_1m_output_tokens"] == {"big": 55.555556, "small": 13.888889}
    assert at1["serving"]["small"]["between_steps"] == [0.0, 2.0]


def test_a_rate_above_a_knee_takes_replicas_each_at_its_price() -> None:
    # 6 req/s: big (knee 8) alone, between 4 and 8: 240 tok/s, 9.259259; small (knee 4) needs 2 replicas of 3 req/s
    # each, 120 tok/s each at $2/h: $4/h in all, 4.62963 per 1M: the cheap variant still is, with two replicas.
    doc = sweep_json("s", PLAN, 10.0, _curves(), required_rate=6.0)
    at6 = doc["cost"]
    assert at6["usd_per_1m_output_tokens"] == {"big": 9.259259, "small": 4.62963} and at6["cheapest"] == "small"
    small = at6["serving"]["small"]
    assert (small["replicas"], small["rate_per_replica_per_s"], small["usd_per_hour"]) == (2, 3.0, 4.0)
    assert small["output_tokens_per_s"] == 240.0 and small["between_steps"] == [2.0, 4.0]
    md = render_sweep_markdown(doc)
    assert "| small | 3.4722 | 4.6296 | 2 × 3 req/s | 4.00 |" in md
    assert "| big | 6.9444 | 9.2593 | 1 × 6 req/s | 8.00 |" in md
    assert "Cheapest to serve 6 req/s meeting every SLO: **small**." in md
    # 9 req/s: big 2 replicas of 4.5 (180 tok/s each: 12.345679, $16/h), small 3 of 3 ($6/h).
    at9 = sweep_json("s", PLAN, 10.0, _curves(), required_rate=9.0)["cost"]
    assert at9["usd_per_1m_output_tokens"] == {"big": 12.345679, "small": 4.62963}
    assert (at9["serving"]["big"]["replicas"], at9["serving"]["big"]["usd_per_hour"]) == (2, 16.0)
    assert at9["serving"]["small"]["usd_per_hour"] == 6.0


def test_a_cheap_variant_that_needs_many_replicas_can_lose() -> None:
    # tiny: $2/h, passes 1 req/s (40 tok/s), fails 2: at 6 req/s it takes 6 replicas ($12/h) at 13.888889 per 1M,
    # dearer than big's 9.259259. Priced per GPU (2 GPUs at $1): the replicas' GPUs add up, 12.
    curves = _curves()
    curves["tiny"] = [step_row(r, _report(r, 0.0, r < 2, gpus=2), "r", 0 if r < 2 else 1) for r in (1.0, 2.0)]
    at6 = sweep_json("s", PLAN, 10.0, curves, required_rate=6.0)["cost"]
    tiny = at6["serving"]["tiny"]
    assert (tiny["replicas"], tiny["gpus"], tiny["usd_per_hour"]) == (6, 12, 12.0)
    assert at6["usd_per_1m_output_tokens"]["tiny"] == 13.888889
    del curves["small"]
    assert sweep_json("s", PLAN, 10.0, curves, required_rate=6.0)["cost"]["cheapest"] == "big"


def test_no_variant_with_a_knee_and_a_price_names_none() -> None:
    curves = {"small": [step_row(r, _report(r, 2.0, False), "r", 1) for r in (2.0, 4.0)]}
    doc = sweep_json("s", PLAN, 10.0, curves, required_rate=3.0)
    assert doc["cost"]["cheapest"] is None and doc["cost"]["serving"] == {"small": None}


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
