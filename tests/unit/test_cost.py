"""Cost and energy per variant: `variants[].cost` / `power` / `gpu_memory` validated strictly; $ per 1M output and
good tokens exact from known tokens, window and price; joules by trapezoids over known power samples; the section
in report.json (schema'd), Markdown and HTML."""

from __future__ import annotations

from array import array

import pytest

from loadgen.config.cost import VariantCost
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from loadgen.live.variant_power import _one_series, kv_usage
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.goodput import goodput_misses
from loadgen.measure.records import RequestRecord
from loadgen.report import build_report, render_markdown
from loadgen.report.cost import energy_json, memory_json, per_million, trapezoid_joules
from loadgen.report.html import render_html
from loadgen.report.html_charts import report_charts

from ..report_schema import checked

SCENARIO = """
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m, cost: {usd_per_hour: 3.6}}
  - {name: b, base_url: "http://127.0.0.1:2", model: m, cost: {usd_per_gpu_hour: 0.9, gpus: 2}}
  - {name: c, base_url: "http://127.0.0.1:3", model: m}
load: {users: 3}
goodput: {ttft_ms: 100}
"""


def _rec(variant: str, i: int, ttft: float, n: int = 5) -> RequestRecord:
    rec = RequestRecord(f"{variant}-{i}", variant, "chat", sent=10.0)
    rec.chunk_times = array("d", [10.0 + ttft + 0.01 * k for k in range(n)])
    rec.chunk_tokens = array("l", [1] * n)
    rec.done = rec.chunk_times[-1]
    rec.output_tokens = n
    rec.goodput_misses = goodput_misses(rec, {"ttft": 100.0})
    return rec


def _agg() -> Aggregate:
    """Per variant: 6 good requests of 5 tokens and 4 that missed the TTFT bound, of 5 tokens: 50 output tokens, 30
    of them good. Added by two workers and merged over the wire."""
    w1, w2 = Aggregate(), Aggregate()
    for v in ("a", "b", "c"):
        for i in range(10):
            (w1 if i % 2 else w2).add(_rec(v, i, 0.05 if i < 6 else 0.3), 0.0)
    merged = Aggregate()
    merged.merge_wire(w1.pop_delta())
    merged.merge_wire(w2.pop_delta())
    return merged


def test_cost_per_million_output_and_good_tokens_is_exact() -> None:
    report = checked(build_report(parse_scenario(SCENARIO), _agg(), 10.0))
    a, b, c = report["variants"]
    assert a["overall"]["output_tokens"] == 50 and a["overall"]["goodput"]["output_tokens"] == 30
    # $3.60/h over 10 s is $0.01: over 50 tokens $200 per 1M, over the 30 good ones $333.33 per 1M.
    assert a["cost_energy"] == {
        "window_s": 10.0,
        "output_tokens": 50,
        "good_output_tokens": 30,
        "cost": {
            "usd_per_hour": 3.6,
            "usd_per_gpu_hour": None,
            "gpus": None,
            "usd_in_window": 0.01,
            "usd_per_1m_output_tokens": 200.0,
            "usd_per_1m_good_tokens": 333.333333,
        },
        "energy": None,
        "gpu_memory": None,
        "kv": None,
    }
    # Two GPUs at $0.90/h are the same $1.80/h: half the cost per token.
    assert b["cost_energy"]["cost"]["usd_per_hour"] == 1.8 and b["cost_energy"]["cost"]["gpus"] == 2
    assert b["cost_energy"]["cost"]["usd_per_1m_output_tokens"] == 100.0
    assert b["cost_energy"]["cost"]["usd_per_1m_good_tokens"] == pytest.approx(1e6 * 0.005 / 30, abs=1e-6)
    assert "cost_energy" not in c  # declares nothing
    md = render_markdown(report)
    assert "## Cost and energy" in md
    assert "| a | 3.60 | 200.0000 | 333.3333 | – | – | – | – | – |" in md
    page = render_html(report)
    assert "<h2>Cost and energy</h2>" in page and "<td>200.0000</td><td>333.3333</td>" in page
    (chart,) = [c for c in report_charts(report) if c["id"] == "cost-per-token"]
    data = chart["config"]["data"]
    assert data["labels"] == ["a", "b"] and [d["data"] for d in data["datasets"]] == [
        [200.0, 100.0],
        [333.333333, 166.666667],
    ]
    assert not [c for c in report_charts(report) if c["id"] == "energy-per-token"]  # no power read: no chart


def test_without_goodput_there_is_no_good_token_cost() -> None:
    report = checked(build_report(parse_scenario(SCENARIO.replace("goodput: {ttft_ms: 100}\n", "")), _agg(), 10.0))
    cost = report["variants"][0]["cost_energy"]
    assert cost["good_output_tokens"] is None and cost["cost"]["usd_per_1m_good_tokens"] is None
    assert cost["cost"]["usd_per_1m_output_tokens"] == 200.0


def test_per_million_needs_tokens_and_a_window() -> None:
    assert per_million(2.0, 3600.0, 1_000_000) == 2.0  # $2/h, a million tokens in the hour
    assert per_million(2.0, 3600.0, 0) is None and per_million(2.0, 0.0, 5) is None


@pytest.mark.parametrize(
    ("cost", "needle"),
    [
        ("{usd_per_hour: 2, usd_per_gpu_hour: 1, gpus: 2}", "not both"),
        ("{}", "give usd_per_hour"),
        ("{usd_per_gpu_hour: 1}", "go together"),
        ("{gpus: 2}", "go together"),
        ("{usd_per_hour: 0}", "greater than 0"),
        ("{usd_per_hour: -3}", "greater than 0"),
        ("{usd_per_gpu_hour: 1, gpus: 1.5}", "whole number"),
        ("{usd_per_hour: 2, currency: eur}", "unknown field"),
    ],
)
def test_a_cost_takes_exactly_one_positive_form(cost: str, needle: str) -> None:
    text = f'variants:\n  - {{name: a, base_url: "http://127.0.0.1:1", model: m, cost: {cost}}}\n'
    with pytest.raises(ConfigError) as err:
        parse_scenario(text)
    assert any(i.path.startswith("variants[0].cost") and needle in i.message for i in err.value.issues), [
        (i.path, i.message) for i in err.value.issues
    ]


def test_power_and_memory_queries_need_the_cluster_prometheus() -> None:
    text = (
        "variants:\n  - {name: a, base_url: 'http://127.0.0.1:1', model: m, power: {query: 'sum(p)'}, "
        "gpu_memory: {query: 'sum(m)', unit: GiB}}\n"
    )
    with pytest.raises(ConfigError) as err:
        parse_scenario(text)
    assert {i.path for i in err.value.issues} == {"variants[0].power", "variants[0].gpu_memory"}
    sc = parse_scenario(text + "metrics: {prometheus: {url: 'http://127.0.0.1:9'}}\n")  # no queries of its own
    v = sc.variants[0]
    assert v.power is not None and v.power.query == "sum(p)" and v.gpu_memory is not None
    assert VariantCost(usd_per_gpu_hour=2.5, gpus=4).hourly_usd() == 10.0
    with pytest.raises(ConfigError):
        parse_scenario(text.replace("sum(p)", "  ") + "metrics: {prometheus: {url: 'http://127.0.0.1:9'}}\n")


def test_trapezoids_over_power_samples() -> None:
    t = [100.0 + k for k in range(11)]
    # A constant 300 W over 10 s: 3000 J, whatever the samples.
    assert trapezoid_joules(t, [300.0] * 11, 100.0, 110.0) == (3000.0, 1.0)
    # A step from 200 W to 400 W between the samples at 104 and 105: 200·4 + 300·1 + 400·5 = 3100 J.
    step = [200.0] * 5 + [400.0] * 6
    assert trapezoid_joules(t, step, 100.0, 110.0) == (3100.0, 1.0)
    # Samples that miss the window's edges: the first and last value held to them; a gap bridged by a trapezoid.
    inner = [None, 200.0, 200.0, None, 200.0, 400.0, 400.0, 400.0, 400.0, 400.0, None]
    joules, coverage = trapezoid_joules(t, inner, 100.0, 110.0) or (0.0, 0.0)
    assert joules == 200 * 1 + 200 * 3 + 300 * 1 + 400 * 4 + 400 * 1 and coverage == 0.8
    assert trapezoid_joules(t, [None] * 11, 100.0, 110.0) is None
    assert trapezoid_joules([90.0, 111.0], [1.0, 1.0], 100.0, 110.0) is None  # nothing inside the window


def test_energy_per_token_and_tokens_per_joule() -> None:
    t = [100.0 + k for k in range(11)]
    e = energy_json("sum(p)", t, [300.0] * 11, 100.0, 110.0, 1500)
    assert e == {
        "query": "sum(p)",
        "samples": 11,
        "note": None,
        "start_unix_s": 100.0,
        "end_unix_s": 110.0,
        "joules": 3000.0,
        "mean_watts": 300.0,
        "coverage": 1.0,
        "joules_per_output_token": 2.0,
        "output_tokens_per_joule": 0.5,
    }
    empty = energy_json("sum(p)", [], [], 100.0, 110.0, 1500)
    assert empty["joules"] is None and "no value" in empty["note"]
    m = memory_json("sum(fb)", [1024.0, 3072.0, None], 1024**2)  # MiB
    assert (m["max_gib"], m["mean_gib"], m["samples"]) == (3.0, 2.0, 2)


def test_several_series_are_summed_point_by_point_and_kv_use_is_read_in_the_window() -> None:
    s1 = {"t_unix_s": [1.0, 2.0, 3.0], "values": [100.0, 100.0, None]}
    s2 = {"t_unix_s": [1.0, 2.0, 3.0], "values": [50.0, 70.0, 80.0]}
    t, v, note = _one_series([s1, s2])
    assert t == [1.0, 2.0, 3.0] and v == [150.0, 170.0, None] and note is not None and "2 series" in note
    sm = {"t_unix_s": [1.0, 2.0, 3.0, 9.0], "series": {"kv_usage": [0.2, 0.4, None, 0.9]}}
    assert kv_usage(sm, 0.0, 5.0) == {"max": 0.4, "mean": 0.3}
    assert kv_usage(None, 0.0, 5.0) is None


def test_a_sequential_run_keeps_each_phases_power_reading() -> None:
    from loadgen.report.combine import Phase, combine_phases

    sc = parse_scenario(SCENARIO)
    energy = {"query": "sum(p)", "samples": 9, "note": None, "joules": 900.0, "mean_watts": 90.0}
    phases = []
    for name in ("a", "b", "c"):
        agg = Aggregate()
        for i in range(10):
            agg.add(_rec(name, i, 0.05), 0.0)
        ce = {"energy": energy, "gpu_memory": None, "kv": {"max": 0.5, "mean": 0.25}} if name == "a" else None
        report = {"run": {"window_s": 10.0, "duration_s": 11.0}, "variants": [{"name": name, "cost_energy": ce}]}
        phases.append(Phase(name, report, agg, f"r/{name}", 0))
    combined, _ = combine_phases(sc, phases, 0.0)
    a, b, c = combined["variants"]
    assert a["cost_energy"]["energy"] == energy and a["cost_energy"]["kv"] == {"max": 0.5, "mean": 0.25}
    assert a["cost_energy"]["cost"]["usd_per_1m_output_tokens"] == 200.0  # its own 10 s window, 50 tokens
    assert b["cost_energy"]["energy"] is None and "cost_energy" not in c
