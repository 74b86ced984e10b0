"""report/numbers.py: one rule per kind of figure, and the writers that use it print the same figure the same way."""

from __future__ import annotations

from loadgen.live.web_rows import llm_rows
from loadgen.report.html import render_html
from loadgen.report.junit import render_junit
from loadgen.report.markdown import render_markdown
from loadgen.report.numbers import (
    AS_SET,
    CHANGE,
    MISSING,
    SHARE,
    USD_PER_HOUR,
    counted,
    figure,
    in_percent,
    ms,
    percent,
    percent_ci,
    stat_ms,
    usd,
)


def test_a_latency_is_to_a_tenth_of_a_millisecond_with_thousands_separated() -> None:
    assert (ms(1234.56), ms(0.04), ms(12), ms(None), ms(None, "no data")) == ("1,234.6", "0.0", "12.0", "–", "no data")
    assert (ms(12.34, signed=True), ms(-0.26, signed=True)) == ("+12.3", "-0.3")


def test_a_percentile_cell_is_censored_only_where_failed_requests_hold_it() -> None:
    assert stat_ms({"p50": 40.04, "p99": None, "count": 9, "censored": 3}, "p99") == "censored"
    assert stat_ms({"p50": 40.04, "p99": None, "count": 9, "censored": 3}, "p50") == "40.0"
    assert stat_ms({"p50": None, "count": 0}, "p50") == MISSING  # no value, none censored
    assert stat_ms(None, "p50") == stat_ms({}, "p50") == MISSING
    assert stat_ms(None, "p50", "—") == "—"  # the web UI's own missing mark


def test_percentages_by_kind() -> None:
    assert percent(0.991234) == "99.12 %"  # a rate judged against a threshold
    assert percent(1) == "100.00 %" and percent(None) == MISSING
    assert percent(0.7407, SHARE) == "74.1 %" and percent(0.75, SHARE) == "75.0 %"  # a share of a whole
    assert percent(0.25, CHANGE, signed=True) == "+25.0 %" and percent(-0.031, CHANGE, signed=True) == "-3.1 %"
    assert percent(0.95, AS_SET) == "95 %" and percent(0.001, AS_SET) == "0.1 %"  # a setting, as written
    assert in_percent(98.765) == "98.77 %" and in_percent(99, AS_SET) == "99 %"
    assert in_percent(None, missing="no requests") == "no requests"
    assert percent_ci(0.9721, 0.961, 0.981) == "97.2 % (96.1–98.1)"
    assert percent_ci(0.9721, None, None) == "97.2 %" and percent_ci(None, 0.1, 0.2) == MISSING


def test_other_kinds() -> None:
    assert (usd(2.77777), usd(3), usd(12.5, USD_PER_HOUR), usd(None)) == ("2.7778", "3.0000", "12.50", "–")
    assert (figure(1234567), figure(2.5, 2), figure("censored"), figure(None)) == ("1,234,567", "2.50", "censored", "–")


def test_a_count_agrees_with_its_noun() -> None:
    # "only 1 requests above it" in the comparison's words; every writer now goes through counted().
    assert (counted(1, "request"), counted(0, "request"), counted(1024, "pair")) == (
        "1 request",
        "0 requests",
        "1,024 pairs",
    )
    assert (counted(1, "reply", "replies"), counted(2, "reply", "replies")) == ("1 reply", "2 replies")


def test_the_comparison_words_agree_with_their_counts() -> None:
    from loadgen.report.compare_md import describe
    from loadgen.report.html import _comparison_words

    e = {"metric": "e2e", "stat": "p99", "speedup": 1.5, "within_noise": None, "tail_n": 1}
    e |= {"ci_low": 1.2, "ci_high": 1.8}
    assert describe(e, 0.95) == "E2E p99: 1.50×, no verdict (only 1 request above it)"
    assert _comparison_words(e) == "no verdict: only 1 request above the percentile"
    assert "(only 3 requests above it)" in describe(e | {"tail_n": 3}, 0.95)


def _report() -> dict:
    summary = {"count": 90, "censored": 10, "p50": 1234.567, "p90": 2000.04, "p95": 2500.0, "p99": None}
    summary |= {"p99.9": None, "max": None, "mean": 1500.26}
    overall = {
        "requests": 100,
        "ok": 90,
        "errors": {"timeout": 10},
        "success_rate": 0.9,
        "cut_by_stop": 0,
        "requests_per_s": 9.0,
        "output_tokens_per_s": 900.0,
        "input_tokens_per_s": 100.0,
        "stopped_at_max_tokens": 0.5,
        "token_count_source": {},
        "metrics_ms": {"ttft": summary, "e2e": summary},
    }
    return {
        "scenario": "s",
        "seed": 0,
        "baseline": "a",
        "histogram": {"relative_error": 0.001},
        "run": {"window_s": 10.0, "trustworthy": True, "workers": {}},
        "variants": [
            {
                "name": "a",
                "baseline": True,
                "overall": overall,
                "mixes": {},
                "speedup_vs_baseline": {},
            }
        ],
        "slos": [
            {
                "variant": "a",
                "mix": None,
                "metric": "ttft",
                "stat": "p50",
                "max_ms": 1000.0,
                "min_percent": None,
                "slo": "ttft p50 ≤ 1000 ms",
                "observed_ms": 1234.567,
                "censored": False,
                "passed": False,
            },
            {
                "variant": "a",
                "mix": None,
                "metric": "success_rate",
                "stat": None,
                "max_ms": None,
                "min_percent": 99.5,
                "slo": "success rate ≥ 99.5 %",
                "observed_percent": 90.0,
                "errors": {"timeout": 10},
                "passed": False,
            },
        ],  # fmt: skip
        "comparison": [],
        "exit_code": 1,
    }


def test_every_writer_prints_a_figure_the_same_way() -> None:
    report = _report()
    md, page, junit = render_markdown(report), render_html(report), render_junit(report)
    row = llm_rows(report)[0]
    for text in (md, page):
        assert "1,234.6" in text and "censored" in text and "90.00 %" in text
    assert "| a | **all** | 90 | 10 | 1,234.6 | 2,000.0 | 2,500.0 | censored | censored | censored | 1,500.3 |" in md
    assert "| 50.0 % |" in md  # stopped at max_tokens: a share
    assert "±0.1 %" in md and "±0.1 %" in page
    assert "ttft p50 1,234.6 ms, threshold ≤ 1000 ms" in junit
    assert "success rate 90.00 %, threshold ≥ 99.5 %" in junit
    assert (row["ttft_p50_ms"], row["ttft_p99_ms"]) == ("1,234.6", "censored")
    assert "(now 1,234.6 ms)" in row["slo"] and "(now 90.00 %)" in row["slo"]
