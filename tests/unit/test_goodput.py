"""Goodput: per-request SLOs judged per successful request, counted per group and merged across workers, reported
as requests/s beside throughput with the requests that missed each bound; the run-trust thresholds and cold-start
gap are scenario fields with checked values."""

from __future__ import annotations

from array import array

import pytest

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.goodput import goodput_misses
from loadgen.measure.records import RequestRecord
from loadgen.report import build_report, render_markdown

from ..report_schema import checked

SCENARIO = """
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m}
goodput: {ttft_ms: 100, tpot_ms: 20}
slos:
  - {metric: ttft, stat: p99, max_ms: 100}
"""


def _rec(i: int, ttft: float, gap: float, n: int = 5, error: str | None = None) -> RequestRecord:
    rec = RequestRecord(f"a-{i}", "a", "chat", sent=10.0, error=error)
    rec.chunk_times = array("d", [] if error else [10.0 + ttft + gap * k for k in range(n)])
    rec.chunk_tokens = array("l", [1] * len(rec.chunk_times))
    rec.done = rec.chunk_times[-1] if rec.chunk_times else 11.0
    rec.output_tokens = len(rec.chunk_times)
    return rec


BOUNDS = {"ttft": 100.0, "tpot": 20.0}


def test_each_successful_request_is_judged_against_every_bound() -> None:
    assert goodput_misses(_rec(0, 0.05, 0.01), BOUNDS) == ()
    assert goodput_misses(_rec(1, 0.20, 0.01), BOUNDS) == ("ttft",)
    assert goodput_misses(_rec(2, 0.20, 0.05), BOUNDS) == ("ttft", "tpot")
    assert goodput_misses(_rec(3, 0.0, 0.0, error="timeout"), BOUNDS) is None  # failures are never good
    assert goodput_misses(_rec(4, 0.05, 0.01, n=1), BOUNDS) == ()  # one token: no TPOT, met vacuously
    stall = _rec(5, 0.05, 0.01)
    stall.chunk_times[3] += 0.3
    stall.chunk_times[4] += 0.3
    assert goodput_misses(stall, {"itl_max": 250.0}) == ("itl_max",)


def test_goodput_is_counted_merged_and_reported_beside_throughput() -> None:
    records = [_rec(i, 0.05, 0.01) for i in range(6)]  # good
    records += [_rec(10 + i, 0.3, 0.01) for i in range(3)]  # slow first token
    records += [_rec(20, 0.3, 0.05), _rec(21, 0.0, 0.0, error="http_5xx")]
    one, w1, w2 = Aggregate(), Aggregate(), Aggregate()
    for i, r in enumerate(records):
        r.goodput_misses = goodput_misses(r, BOUNDS)
        one.add(r, 0.0)
        (w1 if i % 2 else w2).add(r, 0.0)
    merged = Aggregate()
    merged.merge_wire(w1.pop_delta())
    merged.merge_wire(w2.pop_delta())
    sc = parse_scenario(SCENARIO)
    for agg in (one, merged):
        report = checked(build_report(sc, agg, 10.0))
        gp = report["variants"][0]["overall"]["goodput"]
        assert gp == {
            "requests": 6,
            "output_tokens": 30,  # the good requests' 5 tokens each
            "per_s": 0.6,
            "share": round(6 / 11, 4),
            "judged": 10,
            "missed": {"tpot": 1, "ttft": 4},
        }
        assert report["variants"][0]["overall"]["requests_per_s"] == 1.0  # 10 ok over 10 s
        (slo,) = report["slos"]
        # The p99 SLO: the 4 slow ones plus the failed request (censored above everything).
        assert slo["breaching_requests"] == 5 and not slo["passed"]
    md = render_markdown(report)
    assert "## Goodput (ttft ≤ 100 ms, tpot ≤ 20 ms, per request)" in md
    assert "| a | **all** | 0.60 | 1.00 | 54.5 % | 1 | 4 | " in md
    assert "a: ttft p99 ≤ 100 ms — measured" in md and "5 requests over 100 ms" in md


def test_without_goodput_no_group_claims_any() -> None:
    agg = Aggregate()
    agg.add(_rec(0, 0.05, 0.01), 0.0)
    report = build_report(parse_scenario(SCENARIO.replace("goodput: {ttft_ms: 100, tpot_ms: 20}\n", "")), agg, 1.0)
    assert "goodput" not in report["variants"][0]["overall"] and "## Goodput" not in render_markdown(report)


@pytest.mark.parametrize(
    ("extra", "path", "needle"),
    [
        ("goodput: {}\n", "goodput", "at least one bound"),
        ("goodput: {ttft: 100}\n", "goodput.ttft", "unknown field"),
        ("goodput: {ttft_ms: -1}\n", "goodput.ttft_ms", ""),
        ("run_trust: {loop_lag_p99_ms: 0}\n", "run_trust.loop_lag_p99_ms", ""),
        ("cold_starts: {idle_gap: 0s}\n", "cold_starts.idle_gap", ""),
    ],
)
def test_verdict_option_errors_name_the_field(extra: str, path: str, needle: str) -> None:
    text = SCENARIO.replace("goodput: {ttft_ms: 100, tpot_ms: 20}\n", extra)
    with pytest.raises(ConfigError) as err:
        parse_scenario(text)
    issue = next(i for i in err.value.issues if i.path == path)
    assert needle in issue.message


def test_run_trust_defaults_are_the_health_thresholds() -> None:
    from loadgen.measure.health import HealthThresholds

    sc = parse_scenario(SCENARIO)
    assert HealthThresholds(**sc.run_trust.model_dump()) == HealthThresholds()
    assert sc.cold_starts.idle_gap == 30.0


def test_a_successful_reply_with_no_token_is_not_good_whatever_the_bounds() -> None:
    rec = _rec(0, 0.05, 0.01, n=0)  # a 200 that streamed nothing: no TTFT, which would pass every bound vacuously
    assert rec.error is None and goodput_misses(rec, BOUNDS) == ("no_tokens",)
    assert goodput_misses(rec, {"e2e": 10_000.0}) == ("no_tokens",)
    assert goodput_misses(_rec(1, 0.05, 0.01), BOUNDS) == ()


def test_goodput_per_second_is_over_the_window_like_throughput() -> None:
    # Two good requests, one completed in the drain after the window's end (t = 10.3): goodput/s counts one, as
    # requests/s does, and never exceeds it.
    agg = Aggregate()
    agg.window_end = 10.3
    for i, n in ((0, 5), (1, 50)):  # done at 10.09 and 10.54
        rec = _rec(i, 0.05, 0.01, n=n)
        rec.goodput_misses = goodput_misses(rec, BOUNDS)
        agg.add(rec, 0.0)
    overall = build_report(parse_scenario(SCENARIO), agg, 10.0)["variants"][0]["overall"]
    assert overall["goodput"]["requests"] == 2 and overall["drained"] == 1
    assert overall["goodput"]["per_s"] == overall["requests_per_s"] == 0.1
