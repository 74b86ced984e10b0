"""`stop_when:` rules judged on counts (measure/early_stop.py), its config, and the exit code of a run it stopped."""

from __future__ import annotations

from array import array

import pytest
from pydantic import ValidationError

from loadgen.config.scenario import SLO, Scenario
from loadgen.config.stop_when import StopWhen
from loadgen.exit_codes import ExitCode
from loadgen.measure import confidence_sequence as cs
from loadgen.measure.early_stop import (
    StopCounts,
    StopJudge,
    allowed_failure_share,
    certainly_breached,
)
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report.build import exit_code
from loadgen.report.stopped_early import stopped_early_text


def _rec(variant: str = "v", error: str | None = None, tokens: int = 3, warmup: bool = False) -> RequestRecord:
    times = array("d", [0.5 + 0.01 * k for k in range(tokens)])
    rec = RequestRecord("r", variant, "m", sent=0.0, done=1.0, error=error, chunk_times=times, warmup=warmup)
    rec.chunk_tokens = array("l", [1] * tokens)
    return rec


def _judge(rules: dict, slos: list[SLO] | None = None, planned: int | None = None) -> StopJudge:
    return StopJudge(StopWhen.model_validate(rules), slos or [], ["v"], planned)


def test_allowed_failure_share_per_slo_kind() -> None:
    assert allowed_failure_share(SLO(metric="success_rate", min_percent=99)) == pytest.approx((0.01, "all"))
    assert allowed_failure_share(SLO(metric="ttft", stat="p95", max_ms=1)) == pytest.approx(
        (0.05, "before_first_token")
    )
    assert allowed_failure_share(SLO(metric="e2e", stat="max", max_ms=1)) == (0.0, "all")
    assert allowed_failure_share(SLO(metric="itl", stat="p99", max_ms=1)) is None  # failures alone decide nothing


def test_consecutive_failures_per_process_and_a_success_resets() -> None:
    counts, judge = StopCounts(), _judge({"consecutive_failures": 5})
    for _ in range(4):
        counts.add(_rec(error=ErrorKind.HTTP_5XX), 100.0)
    counts.add(_rec(), 100.0)  # a success: the streak starts again
    for _ in range(4):
        counts.add(_rec(error=ErrorKind.HTTP_5XX), 100.0)
    judge.merge("w0", counts.pop_wire())
    assert judge.check(101.0) is None
    counts.add(_rec(error=ErrorKind.HTTP_5XX), 100.0)
    judge.merge("w0", counts.pop_wire())
    found = judge.check(101.0)
    assert found is not None and (found.rule, found.verdict, found.figures["in_a_row"]) == (
        "consecutive_failures",
        "slo_breached",
        5,
    )


def test_error_rate_over_a_sliding_window_forgets_old_seconds() -> None:
    counts, judge = StopCounts(), _judge({"error_rate": {"above_percent": 50, "window": "10s", "min_requests": 10}})
    for i in range(20):  # 20 failures at t=100 s, then 10 successes at t=115 s
        counts.add(_rec(error=ErrorKind.TIMEOUT), 100.0 + i * 0.01)
    judge.merge("w0", counts.pop_wire())
    found = judge.check(105.0)
    assert found is not None and found.figures == {"failed": 20, "ended": 20, "window_s": 10.0, "bound_percent": 50}
    judge = _judge({"error_rate": {"above_percent": 50, "window": "10s", "min_requests": 10}})
    for _ in range(20):
        counts.add(_rec(error=ErrorKind.TIMEOUT), 100.0)
    for _ in range(10):
        counts.add(_rec(), 115.0)
    judge.merge("w0", counts.pop_wire())
    assert judge.check(116.0) is None  # the failures left the window; 10 successes remain
    # Exactly at the bound is not above it: 10 failed of 20.
    judge = _judge({"error_rate": {"above_percent": 50, "window": "10s", "min_requests": 10}})
    for i in range(20):
        counts.add(_rec(error=ErrorKind.TIMEOUT if i % 2 else None), 100.0)
    judge.merge("w0", counts.pop_wire())
    assert judge.check(101.0) is None


def test_unreachable_for_needs_every_process_without_a_response() -> None:
    judge = _judge({"unreachable_for": "5s"})
    a, b = StopCounts(), StopCounts()
    a.add(_rec(error=ErrorKind.CONNECT, tokens=0), 100.0)
    b.add(_rec(error=ErrorKind.CONNECT, tokens=0), 102.0)
    judge.merge("a", a.pop_wire())
    judge.merge("b", b.pop_wire())
    assert judge.check(104.9) is None
    found = judge.check(105.0)
    assert found is not None and (found.rule, found.verdict) == ("unreachable_for", "target_unreachable")
    # A response on b after a's first refusal (an HTTP error counts: the server answered): reachable again.
    b.add(_rec(error=ErrorKind.HTTP_5XX, tokens=0), 103.0)
    judge.merge("b", b.pop_wire())
    assert judge.check(107.0) is None
    a.add(_rec(error=ErrorKind.CONNECT, tokens=0), 104.0)  # refused again after that response: counts from here
    judge.merge("a", a.pop_wire())
    assert judge.check(108.9) is None and judge.check(109.0) is not None


def test_slo_breached_closed_loop_is_sequential_and_waits_for_min_requests() -> None:
    """The test is the confidence sequence's (measure/confidence_sequence.py; its error rate under repeated looks is
    simulated in tests/unit/test_confidence_sequence.py): 10 of 30 failed where 10 % is allowed stopped the old
    per-look Wilson rule (lower bound 0.138 at 99.9 %), not this one; 14 of 30 does."""
    slos = [SLO(metric="success_rate", min_percent=90)]
    judge, counts = _judge({"slo_breached": {"min_requests": 30}}, slos), StopCounts()
    for i in range(29):
        counts.add(_rec(error=ErrorKind.HTTP_5XX if i % 2 else None), 100.0)
    counts.add(_rec(error=ErrorKind.HTTP_5XX, warmup=True), 100.0)  # the warm-up is not the SLO's window
    judge.merge("w0", counts.pop_wire())
    assert judge.check(101.0) is None  # 29 requests: too few
    counts.add(_rec(), 100.0)
    judge.merge("w0", counts.pop_wire())
    found = judge.check(101.0)  # 14 of 30 failed: the sequence's lower end (~0.145 at 99.9 %) is above the 0.10
    assert found is not None and found.figures["failed"] == 14 and found.figures["requests"] == 30
    assert found.figures["failed_share_lower_bound"] == pytest.approx(cs.lower_bound(14, 30, 0.001), abs=1e-6)
    assert found.figures["log_evidence"] == pytest.approx(cs.log_evidence(14, 30, 0.1), abs=1e-3)
    assert found.figures["test"] == {
        "method": cs.METHOD,
        "reference": cs.REFERENCE,
        "valid_under_continuous_monitoring": True,
        "false_stop_at_most": 0.001,
        "pairs_judged": 1,
        "alpha_each": pytest.approx(0.001),
    }
    assert "99.9 % confidence however often it is judged" in found.reason
    judge, counts = _judge({"slo_breached": {"min_requests": 30}}, slos), StopCounts()
    for i in range(30):
        counts.add(_rec(error=ErrorKind.HTTP_5XX if i % 3 == 0 else None), 100.0)
    judge.merge("w0", counts.pop_wire())
    assert judge.check(101.0) is None  # 10 of 30: not beyond doubt under continuous monitoring


def test_slo_breached_splits_its_error_rate_over_the_variant_slo_pairs_it_judges() -> None:
    """A run passes only when every variant meets every SLO: the chance of a false stop is bounded for the run, so
    1 - confidence is split (Bonferroni) over the pairs a failure can decide (an ITL SLO is none of them)."""
    slos = [
        SLO(metric="success_rate", min_percent=90),
        SLO(metric="e2e", stat="p99", max_ms=1000),
        SLO(metric="itl", stat="p99", max_ms=50),
        SLO(metric="ttft", stat="p90", max_ms=500, variant="a"),
    ]
    judge = StopJudge(StopWhen.model_validate({"slo_breached": {"confidence": 0.99}}), slos, ["a", "b"])
    assert judge.judged == 5  # a: success, e2e, ttft; b: success, e2e
    counts = StopCounts()
    for i in range(100):
        counts.add(_rec("b", error=ErrorKind.HTTP_5XX if i % 4 == 0 else None), 100.0)
    judge.merge("w0", counts.pop_wire())
    found = judge.check(101.0)  # 25 of 100 failed: the success rate (10 % allowed) is breached beyond doubt
    assert found is not None and found.variant == "b" and found.figures["allowed_share"] == pytest.approx(0.1)
    assert found.figures["test"]["alpha_each"] == pytest.approx(0.01 / 5)
    assert found.figures["failed_share_lower_bound"] == pytest.approx(cs.lower_bound(25, 100, 0.002), abs=1e-6)
    text = stopped_early_text({"stopped_early": {
        "rule": "slo_breached", "variant": "b", "verdict": "slo_breached", "reason": found.reason,
        "figures": found.figures, "at": "2026-01-01T00:00", "after_s": 3.0, "planned_s": 60.0,
        "arrivals_not_reached": None}})  # fmt: skip
    assert text is not None and cs.METHOD in text and "valid however often it is looked at" in text
    assert "at most 1 % under continuous monitoring, split over the 5 variant-SLO pairs judged" in text


def test_slo_breached_open_loop_is_certain_against_the_planned_arrivals() -> None:
    """p90 TTFT: failures before a first token are censored above every value; with 100 planned arrivals, the p90 is
    lost once 11 of them failed that way — whatever the other 89 do. Failures after tokens do not count for TTFT."""
    slos = [SLO(metric="ttft", stat="p90", max_ms=1000)]
    judge, counts = _judge({"slo_breached": {}}, slos, planned=100), StopCounts()
    for _ in range(30):
        counts.add(_rec(error=ErrorKind.STREAM_INTERRUPTED, tokens=2), 100.0)
    for _ in range(10):
        counts.add(_rec(error=ErrorKind.CONNECT, tokens=0), 100.0)
    judge.merge("w0", counts.pop_wire())
    assert judge.check(101.0) is None  # 10 ≤ 10 % of 100
    counts.add_not_sent("v")  # an arrival never sent is censored in every latency
    judge.merge("w0", counts.pop_wire())
    found = judge.check(101.0)
    assert found is not None and found.figures["failed"] == 11 and found.figures["planned"] == 100
    assert found.figures["test"] == {"method": "certain", "false_stop_at_most": 0.0}
    text = stopped_early_text({"stopped_early": {
        "rule": "slo_breached", "variant": "v", "verdict": "slo_breached", "reason": found.reason,
        "figures": found.figures, "at": "2026-01-01T00:00", "after_s": 3.0, "planned_s": 60.0,
        "arrivals_not_reached": 40}})  # fmt: skip
    assert text is not None and "The test was certain" in text and "a run that meets it is never stopped" in text


def test_certainly_breached_agrees_with_the_reports_own_percentile_rule() -> None:
    """Ground truth: the report's histogram summary with F censored samples among N (None: the stat is censored)."""
    for stat in ("p50", "p90", "p99", "p99.9"):
        slo = SLO(metric="e2e", stat=stat, max_ms=1e6)
        for n in (7, 100, 1001):
            for f in range(0, n + 1, max(1, n // 50)):
                h = LatencyHistogram()
                for _ in range(n - f):
                    h.record(0.001)
                assert certainly_breached(slo, f, n) == (h.summary_ms(f).get(stat) is None and f > 0), (stat, n, f)
    ok = SLO(metric="success_rate", min_percent=99)
    assert not certainly_breached(ok, 1, 100) and certainly_breached(ok, 2, 100)


def test_stop_when_config_is_strict() -> None:
    with pytest.raises(ValidationError, match="give at least one rule"):
        StopWhen.model_validate({})
    with pytest.raises(ValidationError, match="above_percent"):
        StopWhen.model_validate({"error_rate": {"window": "5s"}})
    with pytest.raises(ValidationError, match="extra"):
        StopWhen.model_validate({"consecutive_failure": 3})
    s = Scenario.model_validate(
        {
            "variants": [{"name": "a", "base_url": "http://x:1", "model": "m"}],
            "stop_when": {"unreachable_for": "1m", "slo_breached": {}},
        }
    )
    assert s.stop_when is not None and s.stop_when.unreachable_for == 60.0 and s.stop_when.slo_breached is not None


def test_a_run_stopped_early_is_never_a_pass() -> None:
    stop = {"rule": "error_rate", "variant": "v", "verdict": "slo_breached", "reason": "r", "figures": {},
            "at": "2026-01-01T00:00", "after_s": 3.0, "planned_s": 60.0, "arrivals_not_reached": None}  # fmt: skip
    report = {"run": {"trustworthy": True, "stopped_early": stop}, "slos_passed": True}
    assert exit_code(report) == ExitCode.SLO_BREACHED
    report["run"]["trustworthy"] = False
    assert exit_code(report) == ExitCode.UNTRUSTWORTHY
    text = stopped_early_text(report["run"])
    assert text is not None and "3.0 s into the planned 60 s" in text and "never a pass" in text


def test_a_sequential_run_with_a_phase_stopped_early_is_no_pass_and_keeps_each_phases_lanes() -> None:
    """`load.sequential`: each variant runs alone; one phase stopped by `stop_when` makes the combined report say so
    and exit 1 even where every SLO of the measured figures passed. The phases' sampled requests are joined."""
    from loadgen.config.scenario import parse_scenario
    from loadgen.measure.aggregate import Aggregate
    from loadgen.report.combine import Phase, combine_phases

    sc = parse_scenario(
        "variants:\n  - {name: a, base_url: 'http://127.0.0.1:1', model: m}\n"
        "  - {name: b, base_url: 'http://127.0.0.1:2', model: m}\nslos: []\n"
    )
    stop = {"rule": "consecutive_failures", "variant": "b", "verdict": "slo_breached", "reason": "r", "figures": {},
            "at": "2026-01-01T00:00", "after_s": 2.0, "planned_s": 60.0, "arrivals_not_reached": None}  # fmt: skip
    phases = []
    for name in ("a", "b"):
        agg = Aggregate()
        for i in range(5):
            rec = _rec(name)
            rec.request_id = f"r1-w0-1-{name}-0-{i}"
            agg.add(rec, 0.0)
        lanes = {"method": {"cap_per_variant": 100}, "variants": [{"name": name, "itl_bound_ms": None, "requests": []}]}
        run = {"window_s": 10.0, "duration_s": 11.0, **({"stopped_early": stop} if name == "b" else {})}
        phases.append(Phase(name, {"run": run, "variants": [], "request_timeline": lanes}, agg, f"r/{name}", 0))
    combined, _ = combine_phases(sc, phases, 0.0)
    assert combined["run"]["stopped_early"] == stop and combined["slos_passed"] and combined["exit_code"] == 1
    assert [v["name"] for v in combined["request_timeline"]["variants"]] == ["a", "b"]
