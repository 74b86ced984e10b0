"""The verdict: SLO evaluation, censored failures, success rate, exit codes — from records whose truth is known."""

from __future__ import annotations

from array import array

import pytest

from loadgen.config.scenario import parse_scenario
from loadgen.exit_codes import ExitCode
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report import build_report, render_markdown

from ..report_schema import checked

SCENARIO = """
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m}
  - {name: b, base_url: "http://127.0.0.1:2", model: m}
"""


def _ok(i: int, variant: str = "a", ttft: float = 0.05, gap: float = 0.01, n: int = 10, sent: float = 100.0):
    times = array("d", [sent + ttft + gap * k for k in range(n)])
    rec = RequestRecord(f"{variant}-{i}", variant, "chat", sent=sent, chunk_times=times)
    rec.chunk_tokens = array("l", [1] * n)
    rec.done = times[-1]
    rec.output_tokens = n
    rec.prompt_tokens = 20
    rec.finish_reason = "length"
    return rec


def _failed(i: int, error: str, after: float, variant: str = "a", tokens: int = 0, sent: float = 100.0):
    rec = RequestRecord(f"{variant}-f{i}", variant, "chat", sent=sent, error=error)
    rec.chunk_times = array("d", [sent + 0.05 + 0.01 * k for k in range(tokens)])
    rec.chunk_tokens = array("l", [1] * tokens)
    rec.done = sent + after
    return rec


def _report(records: list[RequestRecord], scenario_text: str = SCENARIO, window_start: float = float("-inf")):
    agg = Aggregate(window_start=window_start)
    for r in records:
        agg.add(r, 0.0)
    return checked(build_report(parse_scenario(scenario_text), agg, 10.0))


def _slo(report: dict, variant: str, metric: str) -> dict:
    return next(s for s in report["slos"] if s["variant"] == variant and s["metric"] == metric)


def test_all_fast_and_successful_passes_with_exit_0() -> None:
    report = _report([_ok(i) for i in range(50)] + [_ok(i, "b") for i in range(50)])
    assert report["exit_code"] == ExitCode.OK
    assert _slo(report, "a", "success_rate")["observed_percent"] == 100.0
    assert all(s["passed"] for s in report["slos"])


def test_ninety_percent_timeouts_fail_although_the_rest_is_fast() -> None:
    # The trap: 10 % fast successes, 90 % timed out after 60 s. Only successes used to reach the histograms.
    recs = [_ok(i) for i in range(10)] + [_failed(i, ErrorKind.TIMEOUT, 60.0) for i in range(90)]
    recs += [_ok(i, "b") for i in range(100)]
    report = _report(recs)
    assert report["exit_code"] == ExitCode.SLO_BREACHED
    sr = _slo(report, "a", "success_rate")
    assert sr["observed_percent"] == pytest.approx(10.0) and not sr["passed"]
    assert sr["errors"] == {"timeout": 90}
    ttft = _slo(report, "a", "ttft")
    assert ttft["censored"] and not ttft["passed"] and ttft["observed_ms"] is None
    assert not _slo(report, "a", "e2e")["passed"]
    assert all(s["passed"] for s in report["slos"] if s["variant"] == "b")
    overall = report["variants"][0]["overall"]
    assert overall["censored"] == {"ttft": 90, "e2e": 90, "tpot": 90}
    assert overall["metrics_ms"]["ttft"]["count"] == 10 and overall["metrics_ms"]["ttft"]["p50"] is None


def test_a_few_early_failures_leave_the_median_but_censor_the_tail() -> None:
    recs = [_ok(i) for i in range(97)] + [_failed(i, ErrorKind.HTTP_5XX, 0.002) for i in range(3)]
    report = _report(
        recs,
        SCENARIO + "slos: [{metric: ttft, stat: p50, max_ms: 100}, {metric: ttft, stat: p99, "
        "max_ms: 100}, {metric: success_rate, min_percent: 95}]",
    )
    ttft = report["variants"][0]["overall"]["metrics_ms"]["ttft"]
    assert ttft["p50"] == pytest.approx(50.0, rel=1e-3) and ttft["p99"] is None and ttft["censored"] == 3
    assert _slo(report, "a", "success_rate")["passed"]  # 97 % >= 95 %
    p50, p99 = (s for s in report["slos"] if s["variant"] == "a" and s["metric"] == "ttft")
    assert p50["passed"] and not p99["passed"] and p99["censored"]
    assert report["exit_code"] == ExitCode.SLO_BREACHED
    md = render_markdown(report)
    assert "censored" in md and "http_5xx 3" in md


def test_failure_after_the_first_token_keeps_its_ttft_and_censors_e2e_and_tpot() -> None:
    recs = [_ok(i) for i in range(9)] + [_failed(0, ErrorKind.STREAM_INTERRUPTED, 0.5, tokens=4)]
    overall = _report(recs)["variants"][0]["overall"]
    assert overall["metrics_ms"]["ttft"]["count"] == 10 and "censored" not in overall["metrics_ms"]["ttft"]
    assert overall["censored"] == {"e2e": 1, "tpot": 1}  # a TPOT is over the whole reply, which never came
    assert overall["output_tokens"] == 9 * 10 + 4  # its streamed tokens count for throughput


def test_success_rate_slo_per_mix_and_no_data_fails() -> None:
    text = SCENARIO + "slos: [{metric: success_rate, min_percent: 99, variant: b}]"
    report = _report([_ok(i) for i in range(10)], text)
    (slo,) = report["slos"]
    assert slo["observed_percent"] is None and not slo["passed"]
    assert report["exit_code"] == ExitCode.SLO_BREACHED


def test_nothing_succeeded_is_a_breach_exit_1_not_untrustworthy() -> None:
    """A dead target is the target's breach: the load generator stays trustworthy, and no SLO list can pass it."""
    report = _report([_failed(i, ErrorKind.CONNECT, 0.001) for i in range(20)], SCENARIO + "slos: []")
    assert report["exit_code"] == ExitCode.SLO_BREACHED and report["slos"] == []
    assert report["run"]["trustworthy"] and report["run"]["untrustworthy_reasons"] == []
    assert report["run"]["target_breaches"] == [
        "variant 'a': no request succeeded: the target is unreachable or failing every one",
        "variant 'b': no request completed inside the measured window",
    ]
    assert "- the target: variant 'a': no request succeeded" in render_markdown(report)


def test_window_counts_what_completed_inside_and_tokens_by_arrival() -> None:
    # Warm-up ends at t = 100.5: a request sent at 100.0 whose chunks run to 100.6 is in the window, and only its
    # chunks after 100.5 count for throughput; one done before 100.5 is warm-up; one cut by the stop is neither.
    start = 100.5
    inside = _ok(0, ttft=0.1, gap=0.1, n=6)  # chunks 100.1 … 100.6, done 100.6
    inside.warmup = False
    early = _ok(1, ttft=0.1, gap=0.05, n=4)  # done 100.25
    early.warmup = True
    cut = _ok(2, ttft=0.1, gap=0.1, n=9, sent=100.2)  # chunks 100.3 … 101.1
    cut.cut_by_stop, cut.output_tokens, cut.finish_reason = True, None, None
    overall = _report([inside, early, cut], window_start=start)["variants"][0]["overall"]
    assert (overall["requests"], overall["warmup_excluded"], overall["cut_by_stop"]) == (1, 1, 1)
    assert overall["output_tokens"] == 2 + 7  # inside: 100.5, 100.6 · cut: 100.5 … 101.1
    assert overall["metrics_ms"]["e2e"]["count"] == 1 and overall["errors"] == {}


def test_usage_counts_the_eos_token_that_came_without_a_chunk() -> None:
    rec = _ok(0, n=10)
    rec.output_tokens = 11
    assert _report([rec])["variants"][0]["overall"]["output_tokens"] == 11


def test_finish_reasons_give_the_share_stopped_at_max_tokens() -> None:
    recs = [_ok(i) for i in range(6)]
    for r in recs[:2]:
        r.finish_reason = "stop"
    overall = _report(recs)["variants"][0]["overall"]
    assert overall["finish_reasons"] == {"length": 4, "stop": 2}
    assert overall["stopped_at_max_tokens"] == pytest.approx(4 / 6, abs=1e-4)


def test_successful_request_without_tokens_is_counted_and_shown() -> None:
    empty = RequestRecord("a-empty", "a", "chat", sent=100.0, done=100.2, output_tokens=0)
    report = _report([_ok(i) for i in range(5)] + [empty])
    overall = report["variants"][0]["overall"]
    assert overall["ok_without_tokens"] == 1 and overall["metrics_ms"]["e2e"]["count"] == 6
    assert "streamed no token" in render_markdown(report)


def test_connection_time_is_reported_beside_ttft() -> None:
    recs = [_ok(i) for i in range(4)]
    recs[0].connect_s, recs[0].tls_s = 0.003, 0.012
    metrics = _report(recs)["variants"][0]["overall"]["metrics_ms"]
    assert metrics["connect"]["count"] == 1 and metrics["connect"]["p50"] == pytest.approx(3.0, rel=1e-3)
    assert metrics["tls"]["p50"] == pytest.approx(12.0, rel=1e-3)


def test_open_loop_requests_give_queue_delay_and_e2e_from_schedule_even_when_they_fail() -> None:
    late = _ok(0, sent=100.0)
    late.scheduled = 99.9  # due 100 ms before it went out
    failed = _failed(0, ErrorKind.HTTP_5XX, 0.01, sent=100.0)
    failed.scheduled = 99.95
    metrics = _report([late, failed])["variants"][0]["overall"]
    qd = metrics["metrics_ms"]["queue_delay"]
    assert qd["count"] == 2 and qd["max"] == pytest.approx(100.0, rel=1e-3)
    fs = metrics["metrics_ms"]["e2e_from_schedule"]
    assert fs["count"] == 1 and fs["censored"] == 1
    assert metrics["censored"]["e2e_from_schedule"] == 1


def test_the_report_says_whether_prompt_lengths_are_exact() -> None:
    report = _report([_ok(0)])
    assert report["prompt_lengths"] == {"exact": False, "tokenizer": None}
    assert "Prompt lengths: approximate" in render_markdown(report)


def test_the_shared_prefix_share_of_the_prompts_sent_is_reported() -> None:
    recs = [_ok(i) for i in range(4)]
    for r in recs:
        r.prompt_tokens_target, r.shared_prefix_tokens = 400, 100
    report = _report(recs)
    assert report["variants"][0]["overall"]["shared_prefix_share"] == 0.25
    assert "shared prefix of the prompts sent (system prompts, shared documents): a 25.0 %" in render_markdown(report)


def test_a_success_rate_a_hair_under_its_bound_fails_exactly() -> None:
    # 1,979,999 of 2,000,000 is 98.99995 %: rounded to six places the share read 0.99 and passed a 99 % SLO.
    agg = Aggregate()
    g = agg.group("a", "chat")
    g.requests, g.ok, g.errors = 2_000_000, 1_979_999, {"timeout": 20_001}
    text = SCENARIO.split("  - {name: b")[0] + "slos: [{metric: success_rate, min_percent: 99}]"
    report = build_report(parse_scenario(text), agg, 10.0)
    (slo,) = report["slos"]
    assert not slo["passed"] and report["exit_code"] == ExitCode.SLO_BREACHED
    g.ok, g.errors = 1_980_000, {"timeout": 20_000}  # exactly 99 %: met
    assert build_report(parse_scenario(text), agg, 10.0)["slos"][0]["passed"]


def test_drained_requests_are_measured_but_outside_the_window_throughput() -> None:
    # The window ends at 101.0: a request done at 101.4 finished in the drain (measured whole; its tokens after the
    # window's end and its completion are not throughput); one still running when the drain ended is a censored E2E
    # sample with its TTFT kept, not in the success rate.
    agg = Aggregate()
    agg.window_end = 101.0
    inside = _ok(0, ttft=0.1, gap=0.1, n=5)  # chunks 100.1 … 100.5
    drained = _ok(1, ttft=0.2, gap=0.2, n=7)  # chunks 100.2 … 101.4
    cut = _ok(2, ttft=0.3, gap=0.1, n=3)  # chunks 100.3 … 100.5, still streaming
    cut.cut_by_stop, cut.done, cut.output_tokens = True, 131.0, None
    for rec in (inside, drained, cut):
        agg.add(rec, 0.0)
    overall = checked(build_report(parse_scenario(SCENARIO), agg, 10.0))["variants"][0]["overall"]
    assert (overall["requests"], overall["ok"], overall["drained"], overall["cut_by_stop"]) == (2, 2, 1, 1)
    assert overall["requests_per_s"] == 0.1  # the one completed inside the 10 s window
    assert overall["output_tokens"] == 5 + 5 + 3  # the drained request's chunks up to 101.0
    e2e, ttft = overall["metrics_ms"]["e2e"], overall["metrics_ms"]["ttft"]
    assert (e2e["count"], e2e["censored"], ttft["count"]) == (2, 1, 3)
    assert overall["cut_by_stop_age_ms"]["max"] == pytest.approx(31_000, rel=1e-3)
