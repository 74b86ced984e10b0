"""`loadgen compare`'s gate on $ per 1M output tokens (report/compare_cost.py), on reports whose tokens and prices are
known: the same price and throughput pass; 20 % less throughput at the same price is a 25 % rise, a regression
whose interval is the throughput interval inverted; a doubled price with the same throughput is a 2x rise; a cost
BASE had and NEW has not is a regression."""

from __future__ import annotations

from array import array
from pathlib import Path

import numpy as np
import orjson
import pytest

from loadgen.cli import main
from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import RequestRecord
from loadgen.report import build_report
from loadgen.report.compare_gate import compare_reports

SCENARIO = """
seed: 5
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m, cost: {usd_per_hour: PRICE}}
  - {name: b, base_url: "http://127.0.0.1:2", model: m, cost: {usd_per_gpu_hour: 1.0, gpus: 2}}
"""


def _report(seed: int, rate_b: float = 1.0, price_a: float = 3.6, n: int = 600) -> dict:
    """Two variants, n requests of 10 tokens each completing evenly over 30 s (b's at rate_b of a's)."""
    g = np.random.default_rng(seed)
    agg = Aggregate()
    for v, rate in (("a", 1.0), ("b", rate_b)):
        count = int(n * rate)
        for i in range(count):
            ttft, gap = g.lognormal(-3, 0.4), g.lognormal(-4, 0.3)
            times = array("d", [100.0 + ttft + gap * k for k in range(10)])
            rec = RequestRecord(f"r1-w0-1-{v}-3-{i}", v, "chat", sent=100.0, chunk_times=times)
            rec.chunk_tokens = array("l", [1] * 10)
            rec.done = times[-1]
            rec.output_tokens = 10
            agg.add(rec, 1_000_000.0 + 30.0 * i / count)
    return build_report(parse_scenario(SCENARIO.replace("PRICE", str(price_a))), agg, 30.0)


@pytest.fixture(scope="module")
def base() -> dict:
    return _report(1)


def _rows(result: dict) -> dict[tuple[str, str], dict]:
    return {(r["variant"], r["metric"]): r for r in result["rows"]}


def test_the_same_price_and_throughput_pass(base: dict) -> None:
    # $3.60/h over 30 s is $0.03, over 6000 tokens: $5 per 1M.
    assert base["variants"][0]["cost_energy"]["cost"]["usd_per_1m_output_tokens"] == 5.0
    rows = _rows(compare_reports(base, _report(2), 0.05))
    cost = rows[("a", "usd_per_1m_output_tokens")]
    assert cost["kind"] == "cost" and not cost["regression"] and cost["ratio"] == 1.0
    assert cost["ci_low"] is not None and cost["ci_low"] <= 1.0 <= cost["ci_high"]


def test_less_throughput_at_the_same_price_is_a_regression_with_the_inverted_interval(
    base: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slow = _report(3, rate_b=0.8)
    result = compare_reports(base, slow, 0.05)
    rows = _rows(result)
    cost, tokens = rows[("b", "usd_per_1m_output_tokens")], rows[("b", "output_tokens_per_s")]
    # 4800 tokens instead of 6000 at $2/h: $/1M is 1 / 0.8 = 1.25 times BASE's.
    assert cost["ratio"] == 1.25 and cost["base"] == pytest.approx(2.0 * 30 / 3600 / 6000 * 1e6, abs=1e-6)
    assert cost["ci_low"] == round(1 / tokens["ci_high"], 4) and cost["ci_high"] == round(1 / tokens["ci_low"], 4)
    assert cost["ci_low"] > 1.0 and cost["regression"] and cost["verdict"] == "regression"
    assert not rows[("a", "usd_per_1m_output_tokens")]["regression"]
    paths = [tmp_path / "base.json", tmp_path / "new.json"]
    for p, doc in zip(paths, (base, slow), strict=True):
        p.write_bytes(orjson.dumps(doc))
    assert main(["compare", *map(str, paths), "--max-regression", "5%"]) == 1
    assert "| b | $ / 1M output tok | 2.7778 | 3.4722 | +25.0 % |" in capsys.readouterr().out


def test_a_doubled_price_is_a_regression_and_a_dropped_cost_too(base: dict) -> None:
    pricier = _report(1, price_a=7.2)  # the same requests, twice the price
    rows = _rows(compare_reports(base, pricier, 0.05))
    cost, tokens = rows[("a", "usd_per_1m_output_tokens")], rows[("a", "output_tokens_per_s")]
    # The throughput interval of two identical timelines (each resampled on its own) is about 1, scaled by 2.
    assert cost["ratio"] == 2.0 and cost["ci_low"] == round(2 / tokens["ci_high"], 4) and cost["ci_low"] > 1.9
    assert cost["regression"]
    dropped = _report(1)
    dropped["variants"][0].pop("cost_energy")
    cost = _rows(compare_reports(base, dropped, 0.05))[("a", "usd_per_1m_output_tokens")]
    assert cost["regression"] and cost["verdict"] == "missing in NEW"
    # BASE without a cost: no cost row.
    assert ("a", "usd_per_1m_output_tokens") not in _rows(compare_reports(dropped, base, 0.05))
