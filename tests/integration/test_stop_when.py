"""`stop_when:` ends a run early, through the master, with the verdict and the reason in the report.

- A variant the simulator fails on every request mid-stream (fault `error_event_rate: 1`: an error event after
  some tokens) beside a healthy one, through `loadgen run --workers 1` (a master and a worker):
  `consecutive_failures` stops a 120 s run in seconds, exit 1, and every request either variant's users sent is in
  the report (sent, failed, cut by the stop: a stopped run has no drain, the healthy variant's streams are cut).
- A dead port, as a local `locust --headless` process (`loadgen run` refuses a dead port before load: exit 1,
  nothing run): `unreachable_for: 2s` stops a 120 s run within its bound, exit 1 — a dead target is a breach, not a
  reason to distrust the load generator (tests/integration/test_exit_codes.py: the same through `loadgen run`).

The time each took to stop is printed for the record (pytest -s).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loadgen.locust_plugin.launcher import free_port
from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, write_scenario

ROOT = Path(__file__).resolve().parents[2]
_PLANNED = "120s"


def _accounted(report: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Every raw record of each variant in the report exactly once: completed (ok or failed), in the warm-up, or
    cut by the stop."""
    for v in report["variants"]:
        mine = [r for r in rows if r["variant"] == v["name"]]
        o = v["overall"]
        assert o["requests"] + o["warmup_excluded"] + o["cut_by_stop"] == len(mine), v["name"]
        assert o["requests"] - o["ok"] == sum(
            1 for r in mine if r["error"] and not r["warmup"] and not r["cut_by_stop"]
        )


def test_a_failing_variant_stops_the_run_through_the_master(tmp_path: Path) -> None:
    with start_sim_process(["good=baseline", "broken=baseline"], faults={"broken": {"error_event_rate": 1.0}}) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"good": sim.base_url("good"), "broken": sim.base_url("broken")},
            load={"users": 4, "duration": _PLANNED, "warmup": 0, "drain": "60s"},
            stop_when={"consecutive_failures": 20},
        )
        started = time.monotonic()
        proc = subprocess.run(
            [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--quiet", "--workers", "1",
             "--raw-records", str(tmp_path / "raw")],
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
        took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    stop = report["run"]["stopped_early"]
    print(f"\nfailing variant: stopped after {stop['after_s']:.1f} s of {stop['planned_s']:g} s (command {took:.1f} s)")
    assert (stop["rule"], stop["variant"], stop["verdict"]) == ("consecutive_failures", "broken", "slo_breached")
    assert stop["figures"]["in_a_row"] >= 20 and stop["arrivals_not_reached"] is None
    # Worker reports every 3 s, the master judges twice a second: well under the planned two minutes.
    assert stop["after_s"] < 30 and took < 60
    assert "failed" not in report["run"] and report["exit_code"] == 1
    assert "Stopped early by stop_when.consecutive_failures" in (tmp_path / "report" / "report.md").read_text()
    assert "stop_when.consecutive_failures" in (tmp_path / "report" / "report.html").read_text()
    _accounted(report, read_records(tmp_path / "raw"))
    # No drain after a rule stopped the run (60 s here): the healthy variant's streams in flight were cut at once.
    good = next(v for v in report["variants"] if v["name"] == "good")["overall"]
    assert good["cut_by_stop"] >= 1 and good["drained"] == 0, good
    broken = next(v for v in report["variants"] if v["name"] == "broken")["overall"]
    assert broken["ok"] == 0 and broken["errors"].get("server_error", 0) >= 20


def test_a_dead_port_stops_a_local_run_within_its_bound(tmp_path: Path) -> None:
    scenario = write_scenario(
        tmp_path / "s.yaml",
        {"dead": f"http://127.0.0.1:{free_port()}"},
        load={"users": 2, "duration": _PLANNED, "warmup": 0},
        stop_when={"unreachable_for": "2s"},
    )
    cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py"), "--scenario", str(scenario),
           "--report-dir", str(tmp_path / "report"), "--raw-records", str(tmp_path / "raw"), "--headless",
           "--only-summary"]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    took = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    stop = report["run"]["stopped_early"]
    print(f"\ndead port: stopped after {stop['after_s']:.1f} s of {stop['planned_s']:g} s (command {took:.1f} s)")
    assert (stop["rule"], stop["variant"], stop["verdict"]) == ("unreachable_for", "dead", "target_unreachable")
    assert stop["figures"]["unreachable_s"] >= 2.0 and stop["after_s"] < 15 and took < 60
    assert stop["reason"].startswith("variant 'dead' was unreachable") and report["exit_code"] == 1
    assert report["run"]["trustworthy"] and report["run"]["untrustworthy_reasons"] == []
    assert report["run"]["target_breaches"] == [
        "variant 'dead': no request succeeded: the target is unreachable or failing every one"
    ]
    _accounted(report, read_records(tmp_path / "raw"))
    assert report["variants"][0]["overall"]["ok"] == 0


def test_an_open_loop_run_stopped_early_accounts_for_every_planned_arrival(tmp_path: Path) -> None:
    """A dead port at a constant 20 req/s for a planned 120 s: stopped by `error_rate`, the arrivals the workers
    reached (sent, dropped, unsent at the stop) plus those the stop left unreached are the schedule's 2,400."""
    rate, planned = 20.0, 120.0
    scenario = write_scenario(
        tmp_path / "s.yaml",
        {"dead": f"http://127.0.0.1:{free_port()}"},
        load={"users": 4, "duration": f"{planned:g}s", "warmup": 0, "arrival": {"kind": "constant", "rate": rate}},
        stop_when={"error_rate": {"above_percent": 90, "window": "5s", "min_requests": 20}},
    )
    cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py"), "--scenario", str(scenario),
           "--report-dir", str(tmp_path / "report"), "--headless", "--only-summary"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert proc.returncode == 1, proc.stderr[-3000:]  # nothing succeeded: a breach, the load generator is fine
    report = read_report(tmp_path / "report")
    stop = report["run"]["stopped_early"]
    print(f"\nopen loop, dead port: stopped after {stop['after_s']:.1f} s of {stop['planned_s']:g} s")
    assert stop["rule"] == "error_rate" and stop["after_s"] < 20
    ol = report["variants"][0]["open_loop"]
    reached = ol["sent"] + ol["dropped"] + ol["unsent_at_stop"] + ol["in_warmup"]
    assert reached == ol["arrivals"] and reached > 0
    # The schedule's offsets start when every user is spawned, a moment after the run's clock: within a second.
    assert abs(reached + stop["arrivals_not_reached"] - rate * planned) <= rate, (reached, stop)


def test_a_closed_loop_slo_breach_is_stopped_by_the_sequential_test_and_the_report_states_its_guarantee(
    tmp_path: Path,
) -> None:
    """A variant failing 30 % of its requests (HTTP 500) where a success rate ≥ 95 % is asked, closed loop: the
    confidence sequence (measure/confidence_sequence.py) stops the planned 120 s in seconds, and every format says
    which test it was and that a run meeting its SLOs is stopped with a chance of at most 0.1 % however often the
    rule is judged."""
    with start_sim_process(["flaky=baseline"], faults={"flaky": {"error_rate": 0.3}}) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"flaky": sim.base_url("flaky")},
            load={"users": 8, "duration": _PLANNED, "warmup": 0},
            slos=[{"metric": "success_rate", "min_percent": 95}],
            stop_when={"slo_breached": {}},
        )
        proc = subprocess.run(
            [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--quiet"],
            capture_output=True, text=True, timeout=90,
        )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    stop = report["run"]["stopped_early"]
    figures = stop["figures"]
    print(f"\nclosed loop, 30 % failing: stopped after {stop['after_s']:.1f} s, {figures['failed']} of "
          f"{figures['requests']} failed, lower bound {figures['failed_share_lower_bound']}")  # fmt: skip
    assert (stop["rule"], stop["variant"], stop["verdict"]) == ("slo_breached", "flaky", "slo_breached")
    assert stop["after_s"] < 30 and figures["requests"] >= 50 and figures["failed_share_lower_bound"] > 0.05
    test = figures["test"]
    assert test["valid_under_continuous_monitoring"] and test["false_stop_at_most"] == 0.001
    assert test["method"].startswith("Robbins' beta-binomial mixture confidence sequence")
    for name in ("report.md", "report.html"):
        text = (tmp_path / "report" / name).read_text()
        assert "valid however often it is looked at" in text and "at most 0.1 % under continuous monitoring" in text
