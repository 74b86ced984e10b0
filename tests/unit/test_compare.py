"""`report["comparison"]` (loadgen/report/compare.py) from records whose truth is known: paired when the variants
replayed the same requests, unpaired from samples or histograms when they did not, censored statistics without a
speedup, reproducible seeds, and the Markdown's words."""

from __future__ import annotations

import zlib
from array import array

import numpy as np

from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report import build_report, render_markdown

from ..report_schema import checked

SCENARIO = """
seed: 11
variants:
  - {name: base, base_url: "http://127.0.0.1:1", model: m}
  - {name: fast, base_url: "http://127.0.0.1:2", model: m}
  - {name: twin, base_url: "http://127.0.0.1:3", model: m}
"""


def _rec(rid: str, variant: str, ttft: float, gap: float, n: int = 8) -> RequestRecord:
    times = array("d", [100.0 + ttft + gap * k for k in range(n)])
    rec = RequestRecord(rid, variant, "chat", sent=100.0, chunk_times=times)
    rec.chunk_tokens = array("l", [1] * n)
    rec.done = times[-1]
    rec.output_tokens = n
    return rec


def _truth(n: int = 600) -> list[tuple[float, float]]:
    g = np.random.default_rng(0)
    return [(float(t), float(d)) for t, d in zip(g.lognormal(-3, 0.5, n), g.lognormal(-4, 0.3, n), strict=True)]


def _report(ids: str = "paired", fast_factor: float = 1.6) -> tuple[dict, list[tuple[float, float]]]:
    """base; fast with TPOT / fast_factor and TTFT unchanged (per request, small noise); twin = base (noise)."""
    truth = _truth()
    g = np.random.default_rng(1)
    agg = Aggregate()
    for i, (ttft, gap) in enumerate(truth):
        for v, f in (("base", 1.0), ("fast", fast_factor), ("twin", 1.0)):
            stream = 3 if ids != "samples" or v == "base" else 4  # "samples": no request in common
            rid = f"r1-w0-9-{v}-{stream}-{i}" if ids != "histograms" else f"{v}#{i}"
            jitter = 1.0 if v == "base" else float(g.lognormal(0, 0.02))
            agg.add(_rec(rid, v, ttft * jitter, gap / f * jitter), 0.0)
    return checked(build_report(parse_scenario(SCENARIO), agg, 10.0)), truth


def _get(report: dict, variant: str, metric: str, stat: str) -> dict:
    return next(e for e in report["comparison"] if (e["variant"], e["metric"], e["stat"]) == (variant, metric, stat))


def test_paired_speedups_hold_the_truth_and_the_twin_is_within_noise() -> None:
    report, truth = _report()
    assert len(report["comparison"]) == 2 * 3 * 2
    method = report["comparison_method"]
    assert (method["resamples"], method["confidence"], method["scenario_seed"]) == (1000, 0.95, 11)
    tpot = _get(report, "fast", "tpot", "p50")
    assert tpot["paired"] is True and tpot["source"] == "pairs" and tpot["n"] == len(truth)
    # fast's gaps are base's / 1.6 times a 2 % jitter: the speedup of medians is 1.6 within the jitter's reach.
    assert abs(tpot["speedup"] - 1.6) < 0.02
    assert tpot["within_noise"] is False and 1.55 < tpot["ci_low"] < 1.6 < tpot["ci_high"] < 1.65
    # The point is the ratio of the paired subset's medians (inverted CDF, integer µs).
    gaps_us = sorted(round(gap * 1e6) for _, gap in truth)
    assert tpot["baseline_ms"] == gaps_us[len(truth) // 2 - 1] / 1e3
    # Per-request difference at the median: fast's gaps are 1 - 1/1.6 = 37.5 % shorter.
    assert tpot["diff_ms"] < 0 and tpot["diff_ci_low_ms"] <= tpot["diff_ms"] <= tpot["diff_ci_high_ms"]
    assert "diff_ms" not in _get(report, "fast", "tpot", "p99")
    for metric in ("ttft", "tpot", "e2e"):
        for stat in ("p50", "p99"):
            twin = _get(report, "twin", metric, stat)
            assert twin["paired"] and twin["ci_low"] <= twin["speedup"] <= twin["ci_high"]
    assert _get(report, "twin", "tpot", "p50")["within_noise"] is True
    assert _get(report, "fast", "ttft", "p50")["within_noise"] is True


def test_seeds_come_from_the_scenario_and_make_intervals_reproducible() -> None:
    a, _ = _report()
    b, _ = _report()
    assert a["comparison"] == b["comparison"]
    e = _get(a, "fast", "e2e", "p99")
    assert e["seed"] == zlib.crc32(b"11/fast/e2e") == _get(a, "fast", "e2e", "p50")["seed"] and e["resamples"] == 1000


def test_without_common_requests_the_comparison_is_unpaired_over_samples() -> None:
    report, truth = _report("samples")
    tpot = _get(report, "fast", "tpot", "p50")
    assert tpot["paired"] is False and tpot["source"] == "samples"
    assert tpot["n_baseline"] == tpot["n_variant"] == tpot["n"] == len(truth)
    assert abs(tpot["speedup"] - 1.6) < 0.03 and tpot["ci_low"] < 1.6 < tpot["ci_high"]
    # Unpaired intervals are wider than paired ones on the same requests.
    paired, _ = _report()
    p = _get(paired, "fast", "tpot", "p50")
    assert tpot["ci_high"] - tpot["ci_low"] > 2 * (p["ci_high"] - p["ci_low"])


def test_without_per_request_values_it_resamples_the_histograms() -> None:
    report, truth = _report("histograms")
    e = _get(report, "fast", "ttft", "p50")
    assert e["paired"] is False and e["source"] == "histograms" and e["n"] == len(truth)
    # The histogram's median is within its relative error (0.1 %) of the true one.
    true_median = sorted(t for t, _ in truth)[len(truth) // 2 - 1] * 1e3
    assert abs(e["baseline_ms"] - true_median) <= 0.002 * true_median
    assert e["within_noise"] is True


def test_a_statistic_among_failed_requests_has_no_speedup() -> None:
    agg = Aggregate()
    for i, (ttft, gap) in enumerate(_truth(200)):
        agg.add(_rec(f"base#{i}", "base", ttft, gap), 0.0)
        rec = _rec(f"fast#{i}", "fast", ttft, gap)
        if i % 10 == 0:  # 10 % time out before their first token: TTFT p99 falls among them
            rec = RequestRecord(f"fast#{i}", "fast", "chat", sent=100.0, error=ErrorKind.TIMEOUT)
            rec.done = 130.0
        agg.add(rec, 0.0)
        agg.add(_rec(f"twin#{i}", "twin", ttft, gap), 0.0)
    report = checked(build_report(parse_scenario(SCENARIO), agg, 10.0))
    e = _get(report, "fast", "ttft", "p99")
    assert e["source"] == "histograms" and e["censored"] is True
    assert e["speedup"] is None and e["within_noise"] is None and e["variant_ms"] is None
    assert _get(report, "fast", "ttft", "p50")["speedup"] is not None
    md = render_markdown(report)
    assert "TTFT p99: no speedup (censored: failed requests)" in md


def test_the_markdown_says_what_differs_and_what_is_within_noise() -> None:
    report, _ = _report()
    md = render_markdown(report)
    tpot = _get(report, "fast", "tpot", "p50")
    line = next(x for x in md.splitlines() if x.startswith("- **fast** vs base:"))
    assert (
        f"TPOT p50 {tpot['speedup']:.2f}× faster (95 % CI {tpot['ci_low']:.2f}–{tpot['ci_high']:.2f}, "
        f"{len(_truth()):,} pairs)" in line
    )
    ttft = _get(report, "fast", "ttft", "p50")
    assert f"Within noise: TTFT p50 ({ttft['ci_low']:.2f}–{ttft['ci_high']:.2f})" in line
    # 600 pairs leave 6 above the p99: its interval is given, judged neither way.
    p99 = _get(report, "fast", "tpot", "p99")
    assert p99["tail_n"] == 6 and p99["within_noise"] is None and p99["ci_low"] is not None
    assert f"TPOT p99: {p99['speedup']:.2f}×, no verdict (only 6 requests above it)" in line
    assert "1,000 bootstrap resamples" in md and "(scenario seed 11)" in md
    assert md.count("| fast | base |") == 6 and md.count("| twin | base |") == 6
