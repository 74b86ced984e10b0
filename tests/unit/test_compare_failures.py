"""Comparisons that count failures (issue 18): a failed request is a censored sample above every measured one in
the report's comparison (paired and unpaired) and in `loadgen compare`; an interval bound that falls among failed
requests is reported as censored in JSON, Markdown, HTML and compare's text — never NaN, never a traceback; and the
summary's `speedup_vs_baseline` is the comparison's speedup."""

from __future__ import annotations

import math
import re
from array import array
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest

from loadgen.cli import main
from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report import build_report, render_markdown
from loadgen.report.compare_gate import compare_reports, render_compare
from loadgen.report.html import render_html

from ..report_schema import checked

SCENARIO = """
seed: 7
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m}
  - {name: b, base_url: "http://127.0.0.1:2", model: m}
"""


def _ok(rid: str, variant: str, ttft: float, gap: float, n: int = 10) -> RequestRecord:
    times = array("d", [100.0 + ttft + gap * k for k in range(n)])
    rec = RequestRecord(rid, variant, "chat", sent=100.0, chunk_times=times)
    rec.chunk_tokens = array("l", [1] * n)
    rec.done = times[-1]
    rec.output_tokens = n
    return rec


def _timeout(rid: str, variant: str) -> RequestRecord:
    """A stall that ends as a timeout before the first token: censored in TTFT and E2E."""
    rec = RequestRecord(rid, variant, "chat", sent=100.0, error=ErrorKind.TIMEOUT)
    rec.done = 160.0
    return rec


def _latencies(n: int, seed: int = 0) -> list[tuple[float, float]]:
    g = np.random.default_rng(seed)
    return [(float(t), float(d)) for t, d in zip(g.lognormal(-3, 0.4, n), g.lognormal(-4, 0.3, n), strict=True)]


def _no_nan(doc: Any) -> None:
    if isinstance(doc, float):
        assert math.isfinite(doc)
    elif isinstance(doc, dict):
        for v in doc.values():
            _no_nan(v)
    elif isinstance(doc, list):
        for v in doc:
            _no_nan(v)


# ---- loadgen compare: the same 1,000-request E2E histogram, NEW with 9 failures (0.9 %) ----------------------------


def _run_report(failures: int) -> dict:
    agg = Aggregate()
    for v in ("a", "b"):
        for i, (ttft, gap) in enumerate(_latencies(1000)):
            agg.add(_ok(f"r1-w0-1-{v}-3-{i}", v, ttft, gap), 1_000_000.0 + 30.0 * i / 1000)
    for i in range(failures):
        agg.add(_timeout(f"r1-w0-1-a-3-{1000 + i}", "a"), 1_000_000.0 + 30.0 * i / failures)
    return checked(build_report(parse_scenario(SCENARIO), agg, 30.0))


@pytest.fixture(scope="module")
def nightly() -> tuple[dict, dict]:
    return _run_report(0), _run_report(9)


def test_compare_with_a_few_failures_in_new_gives_a_verdict_with_a_censored_bound(
    nightly: tuple[dict, dict], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base, new = nightly
    assert new["variants"][0]["overall"]["success_rate"] == pytest.approx(1000 / 1009, abs=1e-6)
    result = compare_reports(base, new, 0.05)
    _no_nan(result)
    row = next(r for r in result["rows"] if (r["variant"], r["metric"]) == ("a", "e2e_p99"))
    # NEW's p99 (rank 999 of 1,009) is a measured value; in many resamples it falls among the 9 failures.
    assert row["new"] is not None and row["ratio"] is not None and row["ratio"] >= 1.0
    assert row["ci_high"] is None and row["ci_high_censored"] is True
    assert row["ci_low"] is not None and row["ci_low_censored"] is False and row["ci_low"] <= row["ratio"]
    assert row["within_noise"] is not None and row["verdict"] in ("within noise", "regression", "within threshold")
    b, n = tmp_path / "base.json", tmp_path / "new.json"
    b.write_bytes(orjson.dumps(base))
    n.write_bytes(orjson.dumps(new))
    code = main(["compare", str(b), str(n), "--json", str(tmp_path / "out.json")])
    assert code in (0, 1) and code == result["exit_code"]
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("| a | E2E p99 (ms) |"))
    assert f"{row['ci_low']:.3f}–censored" in line, line
    assert "censored: the bound falls among failed requests" in out
    written = orjson.loads((tmp_path / "out.json").read_bytes())
    _no_nan(written)
    assert written["rows"] == orjson.loads(orjson.dumps(result["rows"]))


def test_a_statistic_censored_in_new_shows_as_censored_not_as_a_dash() -> None:
    base = _run_report(0)
    new = _run_report(60)  # 5.7 % failed: NEW's p99 is among them
    result = compare_reports(base, new, 0.05)
    row = next(r for r in result["rows"] if (r["variant"], r["metric"]) == ("a", "e2e_p99"))
    assert row["regression"] and row["new"] is None and row["new_censored"] is True
    line = next(x for x in render_compare(result, "B", "N").splitlines() if x.startswith("| a | E2E p99 (ms) |"))
    assert "| censored |" in line and "**censored in NEW" in line


# ---- the report's own comparison: paired, failures censored --------------------------------------------------------


def _paired_report(fail_every: int | None, fast: float = 1.0, streams: tuple[int, int] = (3, 3)) -> dict:
    """a (baseline) and b on the same 1,000 requests; b's latencies / `fast`, and every `fail_every`-th of b's
    requests a stall that ends as a timeout."""
    agg = Aggregate()
    for i, (ttft, gap) in enumerate(_latencies(1000, seed=4)):
        agg.add(_ok(f"r1-w0-9-a-{streams[0]}-{i}", "a", ttft, gap), 0.0)
        rid = f"r1-w0-9-b-{streams[1]}-{i}"
        if fail_every and i % fail_every == fail_every // 2:
            agg.add(_timeout(rid, "b"), 0.0)
        else:
            agg.add(_ok(rid, "b", ttft / fast, gap / fast), 0.0)
    return checked(build_report(parse_scenario(SCENARIO), agg, 10.0))


def _entry(report: dict, metric: str, stat: str) -> dict:
    return next(e for e in report["comparison"] if (e["variant"], e["metric"], e["stat"]) == ("b", metric, stat))


@pytest.mark.parametrize("streams", [(3, 3), (3, 4)], ids=["paired", "unpaired-samples"])
def test_a_variant_whose_stalls_end_in_timeouts_shows_no_e2e_p99_speedup(streams: tuple[int, int]) -> None:
    # b is 1.6x faster on 95 % of the requests; the other 5 % stall and time out. Kept out of the comparison, those
    # are exactly b's worst requests, and its p99 looked 1.6x faster.
    report = _paired_report(20, fast=1.6, streams=streams)
    e = _entry(report, "e2e", "p99")
    assert e["source"] == ("pairs" if streams[0] == streams[1] else "samples")
    assert e["speedup"] is None and e["censored"] is True and e["within_noise"] is None
    assert e["variant_ms"] is None and e["baseline_ms"] is not None
    assert report["variants"][1]["speedup_vs_baseline"]["e2e_p99"] is None
    # The median is still measured, and b is faster there.
    p50 = _entry(report, "e2e", "p50")
    assert p50["speedup"] is not None and p50["speedup"] > 1.4 and p50["within_noise"] is False
    if e["paired"]:
        assert e["n"] == 1000  # the failed requests are pairs too
    md = render_markdown(report)
    assert "E2E p99: no speedup (censored: failed requests)" in md
    assert not re.search(r"E2E p99 [0-9.]+× faster", md)
    summary = next(x for x in md.splitlines() if x.startswith("| b | ") and x.count("|") == 8)
    assert summary.endswith("| censored |"), summary


def test_a_bound_among_the_variants_failures_is_censored_in_every_format() -> None:
    # b = a on the same requests but 9 of them (0.9 %) failed: b's paired p99 is measured (rank 990 of 1,000, the
    # failures above it), and in many resamples it falls among them. Counted, they make b slower at p99.
    report = _paired_report(111)
    _no_nan(report)
    e = _entry(report, "e2e", "p99")
    assert e["paired"] is True and e["n"] == 1000 and e["speedup"] is not None and e["speedup"] < 1
    assert e["ci_low"] is None and e["ci_low_censored"] is True
    assert e["ci_high"] is not None and e["ci_high_censored"] is False and e["within_noise"] is False
    assert e["ci_high"] < 1.0 and e["speedup"] <= e["ci_high"]
    md = render_markdown(report)
    row = next(x for x in md.splitlines() if x.startswith("| b | a | E2E p99 |"))
    assert f"| censored–{e['ci_high']:.2f} |" in row, row
    line = next(x for x in md.splitlines() if x.startswith("- **b** vs a:"))
    assert f"E2E p99 {e['speedup']:.2f}× slower (95 % CI censored–{e['ci_high']:.2f}, 1,000 pairs)" in line
    html = render_html(report)
    assert f"censored – {e['ci_high']:.3f}" in html
    assert "slower than the baseline (a bound falls among failed requests: censored" in html


def test_the_summary_speedup_is_the_comparisons_speedup() -> None:
    report = _paired_report(20, fast=1.6)
    for v in report["variants"]:
        s = v["speedup_vs_baseline"]
        assert set(s) == {f"{m}_{q}" for m in ("ttft", "tpot", "e2e") for q in ("p50", "p99")}
        if v["baseline"]:
            continue
        for key, value in s.items():
            metric, stat = key.split("_")
            assert value == _entry(report, metric, stat)["speedup"], key
    assert "paired" in report["comparison_method"]["speedup"]
