"""Concurrency sweeps: plans at whole numbers of users, the closed-loop saturation rule, the rows and the document
(traffic/sweeps.py, report/sweep.py), and the CLI's refusals before any load (cli/sweep.py). Pure: no load."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from loadgen.cli import main
from loadgen.exit_codes import ExitCode
from loadgen.report.sweep import concurrency_step_row, render_sweep_markdown, sweep_json
from loadgen.traffic.sweeps import (
    Ladder,
    Search,
    StepOutcome,
    SweepPlan,
    geometric_concurrencies,
    knee,
    linear_concurrencies,
    parse_plan,
    throughput_stalled,
)


def _drive(plan: SweepPlan, verdict: Callable[[float], StepOutcome]) -> list[StepOutcome]:
    history: list[StepOutcome] = []
    while (level := plan.next_level(history)) is not None:
        history.append(verdict(level))
        assert len(history) < 100
    return history


def _capacity(limit: float) -> Callable[[float], StepOutcome]:
    return lambda n: StepOutcome(n, slos_passed=n <= limit)


def test_integer_levels() -> None:
    assert linear_concurrencies(4, 32, 4) == (4, 8, 12, 16, 20, 24, 28, 32)
    assert linear_concurrencies(1, 10, 4) == (1, 5, 9)
    assert geometric_concurrencies(1, 64, 2) == (1, 2, 4, 8, 16, 32, 64)
    # 1, 1.5, 2.25, 3.4, 5.1, 7.6: rounded, and the second 2 left out (levels increase strictly)
    assert geometric_concurrencies(1, 10, 1.5) == (1, 2, 3, 5, 8)
    plan = parse_plan("list", "1, 2,4,8", by="concurrency")
    assert isinstance(plan, Ladder) and plan.levels == (1, 2, 4, 8) and not plan.saturation_stops
    assert parse_plan("list", "1,2", by="rate") == Ladder((1.0, 2.0))  # rate ladders still stop at saturation
    assert parse_plan("geometric", "2:20:3", by="concurrency") == Ladder((2, 6, 18), saturation_stops=False)
    assert parse_plan("search", "1:64", by="concurrency", max_steps=5) == Search(1, 64, max_steps=5, integer=True)


@pytest.mark.parametrize(
    ("kind", "text"),
    [
        ("list", "1.5,3"),  # half a user
        ("list", "0,2"),
        ("list", "4,2"),
        ("list", "2,2"),
        ("list", ""),
        ("linear", "1:8:0.5"),
        ("linear", "1.5:8:1"),
        ("linear", "8:1:1"),
        ("geometric", "1:8:1"),
        ("geometric", "1:8.5:2"),
        ("search", "1:8.5"),
        ("search", "8:8"),
        ("search", "0:8"),
    ],
)
def test_bad_integer_plans_are_refused(kind: str, text: str) -> None:
    with pytest.raises(ValueError):
        parse_plan(kind, text, by="concurrency")


@pytest.mark.parametrize("limit", [1, 2, 7, 13, 37, 63, 64])
def test_integer_search_finds_the_exact_knee(limit: int) -> None:
    history = _drive(Search(1, 64, max_steps=20, rel_tol=0.0, integer=True), _capacity(limit))
    assert all(h.level == int(h.level) for h in history)  # never a fraction of a user
    assert knee(history) == limit
    assert len(history) <= 2 + 6  # MIN, MAX, then at most ceil(log2(63)) halvings


def test_integer_search_stops_within_its_tolerance_and_its_steps() -> None:
    # rel_tol 5 %: 100 passes, 104 fails -> within 5 % of 100, no step between them
    history = _drive(Search(1, 200, rel_tol=0.05, integer=True, max_steps=20), _capacity(102))
    found = knee(history)
    assert found is not None and found <= 102
    fails = [h.level for h in history if not h.passed and h.level > found]
    assert min(fails) - found <= max(1, 0.05 * found)
    levels = [h.level for h in _drive(Search(1, 64, integer=True, max_steps=4), _capacity(40))]
    assert levels == [1, 64, 32, 48]


def test_a_concurrency_ladder_climbs_past_one_saturated_step_and_stops_after_two_fails() -> None:
    # Saturated from 16 users on, SLOs met throughout: 16 is a failing step but the ladder goes on to confirm it.
    plan = Ladder((2, 4, 8, 16, 32, 64), saturation_stops=False)
    history = _drive(plan, lambda n: StepOutcome(n, slos_passed=True, saturated=n >= 16))
    assert [h.level for h in history] == [2, 4, 8, 16, 32]
    assert knee(history) == 8  # a saturated step never passes
    # A one-step plateau followed by growth: the climb goes on (the curve is drawn), but the knee is the last step
    # before the first failing one, as for SLOs.
    history = _drive(plan, lambda n: StepOutcome(n, slos_passed=n <= 32, saturated=n == 8))
    assert [h.level for h in history] == [2, 4, 8, 16, 32, 64] and knee(history) == 4
    # An untrustworthy step still stops it at once (the load generator, not the server, was measured).
    history = _drive(plan, lambda n: StepOutcome(n, slos_passed=True, untrustworthy=n >= 8))
    assert [h.level for h in history] == [2, 4, 8] and knee(history) == 4


@pytest.mark.parametrize(
    ("users", "rps", "e2e", "below", "stalled"),
    [
        (128, 75.8, 1679.0, (64, 74.7, 912.0), True),  # measured on the simulator: batch limit 64
        (128, 84.0, 1679.0, (64, 74.7, 912.0), False),  # +12 %: still buying throughput
        (128, 74.0, 900.0, (64, 74.7, 912.0), False),  # flat, but latency did not rise: noise, not a queue
        (33, 30.5, 700.0, (32, 30.0, 690.0), False),  # +1.7 % for +3.1 % users: more than a quarter of it
        (33, 30.1, 700.0, (32, 30.0, 690.0), True),  # +0.3 %: under a quarter of +3.1 %
        (64, 40.0, None, (32, 39.0, 690.0), True),  # the median request failed
        (16, 10.0, 500.0, None, False),  # nothing below to compare with
    ],
)
def test_throughput_stalled(
    users: int, rps: float, e2e: float | None, below: tuple[int, float, float | None] | None, stalled: bool
) -> None:
    assert throughput_stalled(users, rps, e2e, below) is stalled


def _report(rps: float, e2e_p50: float, passed: bool = True, trustworthy: bool = True) -> dict[str, Any]:
    metrics = {m: {"count": 10, "p50": 10.0, "p99": 20.0} for m in ("ttft", "itl")}
    metrics["e2e"] = {"count": 10, "p50": e2e_p50, "p99": 2 * e2e_p50}
    return {
        "run": {"trustworthy": trustworthy, "untrustworthy_reasons": [] if trustworthy else ["lag"]},
        "slos_passed": passed,
        "slos": [{"slo": "e2e p99 ≤ 1000 ms", "passed": passed}],
        "variants": [
            {
                "name": "a",
                "overall": {
                    "requests": 100,
                    "success_rate": 1.0,
                    "requests_per_s": rps,
                    "output_tokens_per_s": 40 * rps,
                    "metrics_ms": metrics,
                },
            }
        ],
    }


def _curve(points: list[tuple[int, float, float, bool]]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for users, rps, e2e, passed in points:
        rows.append(concurrency_step_row(users, _report(rps, e2e, passed), f"a/{users}/report.json", 0, rows))
    return rows


def test_concurrency_rows_and_the_sweep_document() -> None:
    rows = _curve([(16, 29.2, 560.0, True), (32, 46.4, 665.0, True), (64, 74.7, 912.0, True), (128, 75.8, 1680, True)])
    assert [r["concurrency"] for r in rows] == [16, 32, 64, 128]
    assert [r["compared_with_concurrency"] for r in rows] == [None, 16, 32, 64]
    assert rows[1]["requests_per_s_gain"] == pytest.approx(46.4 / 29.2 - 1, abs=1e-4)
    assert [r["saturated"] for r in rows] == [False, False, False, True]
    assert [r["passed"] for r in rows] == [True, True, True, False]
    assert "requested_rate_per_s" not in rows[0] and rows[0]["e2e_p99_ms"] == 1120.0
    slow = _curve([(16, 20.0, 700.0, True), (32, 30.0, 900.0, False), (64, 31.0, 1900.0, False)])
    doc = sweep_json(
        "s", {"by": "concurrency", "kind": "concurrency", "spec": "16,32,64,128"}, 4.0, {"a": rows, "b": slow}
    )
    assert [v["knee_concurrency"] for v in doc["variants"]] == [64, 16]
    assert isinstance(doc["variants"][0]["knee_concurrency"], int) and "knee_rate_per_s" not in doc["variants"][0]
    assert doc["exit_code"] == ExitCode.OK
    md = render_sweep_markdown(doc)
    assert "| a | 64 |" in md and "| b | 16 |" in md and "knee (users)" in md and "closed loop" in md
    assert "| 128 | 75.80 |" in md and "saturated" in md and "Breached: 32 users: e2e p99 ≤ 1000 ms" in md
    never = _curve([(16, 20.0, 700.0, False), (32, 30.0, 900.0, False)])
    assert sweep_json("s", {"by": "concurrency", "kind": "c", "spec": "16"}, 4.0, {"a": never})["exit_code"] == 1


def test_a_stall_is_judged_against_the_nearest_lower_trustworthy_step() -> None:
    # A search runs 1, 64, 32, 48: 48 compares with 32 (not 64 above it, nor the step just before it)
    rows: list[dict[str, Any]] = []
    for users, rps, e2e in [(1, 2.0, 500.0), (64, 70.0, 900.0), (32, 45.0, 660.0), (48, 46.0, 800.0)]:
        rows.append(concurrency_step_row(users, _report(rps, e2e), "r", 0, rows))
    assert [r["compared_with_concurrency"] for r in rows] == [None, 1, 1, 32]
    assert [r["saturated"] for r in rows] == [False, False, False, True]
    untrusted = concurrency_step_row(8, _report(9.0, 500.0, trustworthy=False), "r", 3, [])
    later = concurrency_step_row(16, _report(9.1, 600.0), "r", 0, [untrusted])
    assert later["compared_with_concurrency"] is None and not later["saturated"]
    missing = concurrency_step_row(16, None, "r", 3, [])
    assert not missing["trustworthy"] and not missing["passed"]


def _scenario(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(
        "variants: [{name: a, base_url: 'http://127.0.0.1:9', model: m}]\n"
        "load: {duration: 10s, warmup: 2s, spawn_rate: 16}\n" + extra,
        encoding="utf-8",
    )
    return path


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--concurrency", "4,2"], "--concurrency"),
        (["--concurrency", "1.5,3"], "--concurrency"),
        (["--concurrency-linear", "1:8"], "--concurrency-linear"),
        (["--concurrency-linear", "1:8:0.5"], "--concurrency-linear"),
        (["--concurrency-geometric", "1:8:1"], "--concurrency-geometric"),
        (["--concurrency-search", "8:4"], "--concurrency-search"),
        (["--concurrency-search", "1:2.5"], "--concurrency-search"),
        (["--concurrency-search", "1:8", "--max-steps", "1"], "--max-steps"),
        (["--concurrency", "1,2", "--max-steps", "3"], "--max-steps"),
        (["--concurrency", "1,2", "--step-duration", "2s"], "--step-duration"),  # not longer than the warm-up
        (["--concurrency", "1,64"], "load.spawn_rate"),  # 64 users at 16/s take 4 s, longer than the 2 s warm-up
        (["--concurrency-search", "1:64"], "load.warmup"),
    ],
)
def test_bad_concurrency_flags_exit_2_naming_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], named: str
) -> None:
    path = _scenario(tmp_path)
    assert main(["sweep", str(path), *flags, "--report-dir", str(tmp_path / "out")]) == ExitCode.USAGE
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("arrival", ["", "  arrival: {kind: poisson, rate: 5}\n"])
def test_open_loop_slos_are_refused_before_any_load_naming_the_slo(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], arrival: str
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "variants: [{name: a, base_url: 'http://127.0.0.1:9', model: m}]\n"
        "load:\n  duration: 10s\n  warmup: 2s\n" + arrival + "slos:\n"
        "  - {metric: e2e, stat: p99, max_ms: 900}\n"
        "  - {metric: e2e_from_schedule, stat: p99, max_ms: 1000}\n",
        encoding="utf-8",
    )
    assert main(["sweep", str(path), "--concurrency", "1,2", "--report-dir", str(tmp_path / "out")]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "slos[1]" in err and "e2e_from_schedule" in err and "--rates" in err
    assert not (tmp_path / "out").exists()


def test_an_agent_sweeps_knee_is_the_most_concurrent_agents_that_met_the_session_slo() -> None:
    rows: list[dict[str, Any]] = []
    for users, rps, per_hour, p95, passed in [(2, 10.0, 700.0, 9_000.0, True), (4, 19.0, 1300.0, 11_000.0, False)]:
        report = _report(rps, 400.0, passed)
        report["slos"] = [{"slo": "session_duration p95 ≤ 10000 ms", "passed": passed}]
        duration = {"count": 20, "p50": p95 / 2, "p95": p95, "censored": 1}
        report["variants"][0]["sessions"] = {
            "agent": {"sessions": 21, "good": 18, "sessions_per_hour": per_hour, "duration_ms": duration}
        }
        rows.append(concurrency_step_row(users, report, f"a/{users}/report.json", 0, rows))
    assert rows[0]["sessions_per_hour"] == 700.0 and rows[0]["session_duration_p95_ms"] == 9_000.0
    doc = sweep_json("s", {"by": "concurrency", "kind": "concurrency", "spec": "2,4"}, 20.0, {"a": rows})
    assert doc["variants"][0]["knee_concurrency"] == 2
    md = render_sweep_markdown(doc)
    assert "| users (agents) | sessions / h | session p50 ms | session p95 ms | good sessions |" in md
    assert "| 4 | 1,300.0 | 5,500.0 | 11,000.0 | 18 of 21 |" in md
    assert "Breached: 4 users: session_duration p95 ≤ 10000 ms" in md
    # A scenario without agent tasks: no such table.
    assert "sessions / h" not in render_sweep_markdown(
        sweep_json("s", {"by": "concurrency", "kind": "c", "spec": "2"}, 4.0, {"a": _curve([(2, 5.0, 100.0, True)])})
    )
