"""report/decision.py: speed, quality and cost side by side, from the figures the report's own sections hold."""

from __future__ import annotations

from typing import Any

from loadgen.report.decision import decision_html, decision_markdown_lines, decision_rows


def _variant(name: str, usd_per_1m: float | None) -> dict[str, Any]:
    cost = {"cost": {"usd_per_1m_output_tokens": usd_per_1m, "usd_per_hour": 2.5}} if usd_per_1m else None
    return {"name": name, "cost_energy": cost}


def _report(**extra: Any) -> dict[str, Any]:
    e2e = {"metric": "e2e", "stat": "p50", "speedup": 1.3622, "ci_low": 1.0311, "ci_high": 1.9702}
    agreement = {"value": 0.9815, "ci_low": 0.9707, "ci_high": 0.9922}
    return {
        "baseline": "baseline",
        "variants": [_variant(n, c) for n, c in (("baseline", 0.9952), ("int8", 0.6258), ("spec-decode", 0.556))]
        + [_variant("eagle", 0.5)],
        "comparison": [
            e2e | {"variant": "int8", "within_noise": False},
            {"variant": "int8", "metric": "ttft", "stat": "p50", "speedup": 9.0},  # not the row's statistic
            e2e | {"variant": "spec-decode", "speedup": 1.02, "ci_low": 0.9, "within_noise": True},
            e2e | {"variant": "eagle", "within_noise": None, "tail_n": 8},
        ],
        "comparison_method": {"confidence": 0.95},
        "quality": {
            "method": {"first_k": 64},
            "entries": [
                {"variant": "int8", "mix": "*", "pairs": 1, "agreement": agreement},
                {"variant": "int8", "mix": "chat", "pairs": 1, "agreement": {"value": 0.5}},  # a mix's, not all
            ],
        },
    } | extra


def test_one_row_per_variant_with_speed_quality_and_cost() -> None:
    assert decision_rows(_report()) == [
        ("baseline", "1.00× (baseline)", "baseline", "0.9952"),
        ("int8", "1.36× (1.03–1.97)", "98.2 % (97.1–99.2), 1 pair", "0.6258"),
        ("spec-decode", "1.02× (0.90–1.97), within noise", "no pairs", "0.5560"),
        ("eagle", "1.36× (1.03–1.97), no verdict (8 requests above it)", "no pairs", "0.5000"),
    ]
    md = "\n".join(decision_markdown_lines(_report()))
    assert "## Speed, quality and cost" in md and "the first 64 tokens" in md
    assert "| int8 | 1.36× (1.03–1.97) | 98.2 % (97.1–99.2), 1 pair | 0.6258 |" in md
    page = decision_html(_report())
    assert "<h2>Speed, quality and cost</h2>" in page and "<td>98.2 % (97.1–99.2), 1 pair</td>" in page


def test_censored_and_missing_figures_say_so() -> None:
    report = _report()
    report["comparison"][0] |= {"ci_low_censored": True, "ci_low": None}
    report["variants"][2]["cost_energy"] = None
    rows = {name: cells for name, *cells in decision_rows(report)}
    assert rows["int8"][0] == "1.36× (censored–1.97)" and rows["spec-decode"][2] == "–"
    report["comparison"][0] |= {"censored": True, "speedup": None}
    assert decision_rows(report)[1][1] == "censored"


def test_only_when_there_is_more_than_speed_to_show() -> None:
    assert decision_rows(_report(quality=None)) != []  # costs alone
    assert decision_rows(_report(quality=None))[1][2] == "–"
    without_costs = _report(quality=None)
    without_costs["variants"] = [_variant("baseline", None), _variant("int8", None)]
    assert decision_rows(without_costs) == [] and decision_markdown_lines(without_costs) == []
    assert decision_html(without_costs) == ""
    one = _report()
    one["variants"] = one["variants"][:1]
    assert decision_rows(one) == []
