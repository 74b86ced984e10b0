"""Sweep plans (traffic/sweeps.py) and the sweep's result (report/sweep.py): pure, no load, no sleeping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from loadgen.cli import main
from loadgen.exit_codes import ExitCode
from loadgen.report.sweep import render_sweep_markdown, step_row, sweep_json
from loadgen.traffic.sweeps import (
    Ladder,
    Search,
    StepOutcome,
    SweepPlan,
    geometric_rates,
    knee,
    linear_rates,
    parse_plan,
    saturated,
)


def _drive(plan: SweepPlan, verdict: Callable[[float], StepOutcome]) -> list[StepOutcome]:
    history: list[StepOutcome] = []
    while (level := plan.next_level(history)) is not None:
        history.append(verdict(level))
        assert len(history) < 100
    return history


def _capacity(limit: float) -> Callable[[float], StepOutcome]:
    return lambda r: StepOutcome(r, slos_passed=r <= limit)


def test_linear_and_geometric_rates_include_the_stop_they_land_on() -> None:
    assert linear_rates(2, 10, 2) == (2, 4, 6, 8, 10)
    assert linear_rates(0.1, 0.3, 0.1) == (0.1, 0.2, 0.3)
    assert linear_rates(1, 4.5, 2) == (1, 3)
    assert geometric_rates(1, 64, 2) == (1, 2, 4, 8, 16, 32, 64)
    assert geometric_rates(1, 10, 3) == (1, 3, 9)


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("rates", "4,2"),
        ("rates", "2,x"),
        ("rates", "0,1"),
        ("rates", ""),
        ("linear", "1:10"),
        ("linear", "10:1:1"),
        ("linear", "1:10:0"),
        ("geometric", "1:10:1"),
        ("geometric", "0:10:2"),
        ("search", "8:4"),
        ("search", "1:2:3"),
        ("search", "a:b"),
    ],
)
def test_bad_plans_are_refused(kind: str, text: str) -> None:
    with pytest.raises(ValueError):
        parse_plan(kind, text)


def test_a_ladder_climbs_until_two_fails_in_a_row() -> None:
    plan = Ladder((1, 2, 4, 8, 16, 32))
    history = _drive(plan, _capacity(5))
    assert [h.level for h in history] == [1, 2, 4, 8, 16]
    assert knee(history) == 4


def test_one_fail_then_a_pass_keeps_climbing_but_the_knee_is_the_last_pass_before_the_first_fail() -> None:
    flaky = {2.0}
    history = _drive(Ladder((1, 2, 4, 8, 16)), lambda r: StepOutcome(r, slos_passed=r not in flaky and r <= 4))
    assert [h.level for h in history] == [1, 2, 4, 8, 16]
    assert knee(history) == 1


def test_the_knee_is_the_last_level_before_the_first_failing_level() -> None:
    # 2 ✓ 4 ✗ 8 ✓: the knee is 2, not 8 — 4 req/s already failed once.
    steps = [StepOutcome(2, True), StepOutcome(4, False), StepOutcome(8, True)]
    assert knee(steps) == 2
    assert knee(list(reversed(steps))) == 2  # level order, not the order they ran in (a search)
    # A saturated or untrustworthy step is a failing one too.
    assert knee([StepOutcome(2, True), StepOutcome(4, True, saturated=True), StepOutcome(8, True)]) == 2
    assert knee([StepOutcome(2, True), StepOutcome(4, True, untrustworthy=True), StepOutcome(8, True)]) == 2
    assert knee([StepOutcome(2, False), StepOutcome(4, True)]) is None
    assert knee([StepOutcome(2, True), StepOutcome(4, True)]) == 4


def test_a_search_bisects_below_the_first_failure() -> None:
    # MIN passes, MAX fails, the midpoint fails, then a level under it passes but one above the midpoint would:
    # the search narrows between the knee and the lowest failure, never above a failure.
    outcome = {1.0: True, 64.0: False, 32.5: False, 16.75: True, 24.625: False}
    history = _drive(Search(1, 64, max_steps=5, rel_tol=0.01), lambda r: StepOutcome(r, outcome.get(r, True)))
    assert [h.level for h in history] == [1, 64, 32.5, 16.75, 24.625]
    assert knee(history) == 16.75


def test_a_saturated_or_untrustworthy_step_stops_the_climb_at_once() -> None:
    history = _drive(Ladder((1, 2, 4, 8)), lambda r: StepOutcome(r, slos_passed=True, saturated=r >= 2))
    assert [h.level for h in history] == [1, 2]
    assert knee(history) == 1  # a saturated step does not pass, whatever its SLOs say
    history = _drive(Ladder((1, 2, 4, 8)), lambda r: StepOutcome(r, slos_passed=True, untrustworthy=r >= 4))
    assert [h.level for h in history] == [1, 2, 4] and knee(history) == 2


def test_a_ladder_that_never_passes_has_no_knee() -> None:
    history = _drive(Ladder((1, 2, 4)), _capacity(0.5))
    assert [h.level for h in history] == [1, 2] and knee(history) is None


@pytest.mark.parametrize("limit", [1.0, 3.3, 7.77, 12.5, 63.9])
def test_search_bisects_to_within_its_tolerance(limit: float) -> None:
    plan = Search(1, 64, max_steps=20, rel_tol=0.05)
    history = _drive(plan, _capacity(limit))
    assert history[0].level == 1 and history[1].level == 64
    found = knee(history)
    assert found is not None and found <= limit
    fails = [h.level for h in history if not h.passed]
    assert min(fails) - found <= 0.05 * found  # the first failing rate above the knee is within 5 %


def test_search_ends_early_when_min_fails_or_max_passes_and_stays_within_max_steps() -> None:
    assert [h.level for h in _drive(Search(2, 32), _capacity(1))] == [2]
    assert [h.level for h in _drive(Search(2, 32), _capacity(100))] == [2, 32]
    history = _drive(Search(1, 1000, max_steps=4, rel_tol=0.001), _capacity(300))
    assert [h.level for h in history] == [1, 1000, 500.5, 250.75]
    assert knee(history) == 250.75
    untrusted = _drive(Search(1, 64), lambda r: StepOutcome(r, slos_passed=True, untrustworthy=r > 1))
    assert [h.level for h in untrusted] == [1, 64]


def test_saturation_counts_against_the_steps_own_schedule() -> None:
    assert not saturated(sent=90, scheduled=100)
    assert saturated(sent=89, scheduled=100)
    assert saturated(sent=0, scheduled=0)  # a step that scheduled nothing in its window measured nothing


def _report(achieved: float, sent: int, unsent: int, passed: bool, trustworthy: bool = True) -> dict[str, Any]:
    metrics = {m: {"count": 10, "p50": 10.0, "p99": 20.0} for m in ("ttft", "itl", "e2e")}
    metrics["e2e"] = {"count": 9, "censored": 1, "p50": 100.0, "p99": None}
    return {
        "run": {"trustworthy": trustworthy, "untrustworthy_reasons": [] if trustworthy else ["lag"]},
        "slos_passed": passed,
        "slos": [{"slo": "ttft p99 <= 30 ms", "passed": passed}],
        "variants": [
            {
                "name": "a",
                "overall": {"requests": 10, "success_rate": 0.9, "output_tokens_per_s": 123.4, "metrics_ms": metrics},
                "open_loop": {"achieved_rate_per_s": achieved, "sent": sent, "dropped": 0, "unsent_at_stop": unsent},
            }
        ],
    }


def test_step_rows_and_the_sweep_document() -> None:
    rows = [
        step_row(2, _report(2.1, 20, 0, True), "a/1/report.json", 0),
        step_row(4, _report(4.0, 40, 1, False), "a/2/report.json", 1),
        step_row(8, _report(6.0, 60, 20, True), "a/3/report.json", 0),
    ]
    assert rows[0]["passed"] and rows[0]["ttft_p99_ms"] == 20.0 and rows[0]["e2e_p99_ms"] == "censored"
    assert not rows[1]["passed"] and rows[1]["failed_slos"] == ["ttft p99 <= 30 ms"]
    assert rows[2]["saturated"] and not rows[2]["passed"]
    doc = sweep_json("s", {"kind": "rates", "spec": "2,4,8"}, 3.0, {"a": rows, "b": rows[1:]})
    assert [v["knee_rate_per_s"] for v in doc["variants"]] == [2, None]
    # 2 ✓ 4 ✗ 8 ✓: the knee is 2, not 8.
    recovered = [*rows[:2], step_row(8, _report(8.0, 80, 0, True), "a/3/report.json", 0)]
    assert recovered[2]["passed"]
    doc8 = sweep_json("s", {"kind": "rates", "spec": "2,4,8"}, 3.0, {"a": recovered})
    assert doc8["variants"][0]["knee_rate_per_s"] == 2
    assert doc["exit_code"] == ExitCode.SLO_BREACHED
    md = render_sweep_markdown(doc)
    assert "| a | 2.00 |" in md and "| b | – |" in md and "saturated" in md and "censored" in md
    assert sweep_json("s", {"kind": "rates", "spec": "2"}, 3.0, {"a": rows[:1]})["exit_code"] == ExitCode.OK
    missing = step_row(2, None, "a/1/report.json", 3)
    assert not missing["passed"] and not missing["trustworthy"]
    untrusted = [step_row(2, _report(2.0, 20, 0, True, trustworthy=False), "r", 3)]
    assert sweep_json("s", {"kind": "rates", "spec": "2"}, 3.0, {"a": untrusted})["exit_code"] == ExitCode.UNTRUSTWORTHY
    # A step that gave no verdict — failed (4), killed (128 + N), refused after the sweep checked it (2) — fails the
    # sweep (4), over an untrustworthy step.
    for code in (4, 137, 2):
        failed = [*untrusted, step_row(4, None, "r", code)]
        assert sweep_json("s", {"kind": "rates", "spec": "2,4"}, 3.0, {"a": failed})["exit_code"] == ExitCode.RUN_FAILED


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--rates", "8,4"], "--rates"),
        (["--linear", "1:2"], "--linear"),
        (["--geometric", "1:8:1"], "--geometric"),
        (["--search", "9:3"], "--search"),
        (["--search", "1:9", "--max-steps", "1"], "--max-steps"),
        (["--rates", "1,2", "--max-steps", "3"], "--max-steps"),
        (["--rates", "1,2", "--step-duration", "soon"], "--step-duration"),
        (["--rates", "1,2", "--step-duration", "1s"], "--step-duration"),  # not longer than the 2 s warm-up
    ],
)
def test_bad_sweep_flags_exit_2_naming_the_flag(
    tmp_path: Any, capsys: pytest.CaptureFixture[str], flags: list[str], named: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "variants: [{name: a, base_url: 'http://127.0.0.1:9', model: m}]\nload: {duration: 10s, warmup: 2s}\n",
        encoding="utf-8",
    )
    assert main(["sweep", str(path), *flags, "--report-dir", str(tmp_path / "out")]) == ExitCode.USAGE
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out" / "sweep.json").exists()
