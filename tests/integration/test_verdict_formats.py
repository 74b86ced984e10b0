"""The verdict in every format, end to end against the simulator: a deliberately tight SLO exits 1 and JSON,
Markdown, HTML and JUnit all name it with measured vs threshold; a loose one exits 0; a worker whose loop is
deliberately blocked makes the run exit 3 and every format names the worker and what was measured."""

from __future__ import annotations

import html
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from junitparser import Failure, JUnitXml

from loadgen.sim.launch import start_sim_process

from .harness import read_report, run_loadgen, write_scenario

HOG = """
import time

import gevent
from locust import events

from loadgen.locust_plugin.locustfile import StreamingLLMUser  # noqa: F401


@events.test_start.add_listener
def _hog(environment, **_):
    def hog():
        while True:
            # Busy for 60 ms (time.sleep is gevent's under Locust): the whole loop stops, every stream waits.
            start = time.perf_counter()
            while time.perf_counter() - start < 0.06:
                pass
            gevent.sleep(0.01)

    gevent.spawn(hog)
"""


@pytest.fixture(scope="module")
def sim() -> Any:
    with start_sim_process(["a=int8"]) as s:
        yield s


def _formats(report_dir: Path) -> dict[str, str]:
    junit = report_dir / "junit.xml"
    subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "report", str(report_dir), "--format", "junit", "--out", str(junit)],
        check=False,
    )
    return {
        "md": (report_dir / "report.md").read_text(encoding="utf-8"),
        "html": (report_dir / "report.html").read_text(encoding="utf-8"),
        "junit": junit.read_text(encoding="utf-8"),
    }


def _junit_failures(report_dir: Path) -> dict[str, str]:
    suites = JUnitXml.fromfile(str(report_dir / "junit.xml"))
    return {c.name: r.message for s in suites for c in s for r in c.result if isinstance(r, Failure)}


def test_a_tight_slo_exits_1_and_every_format_names_it_a_loose_one_exits_0(tmp_path: Path, sim: Any) -> None:
    (tmp_path / "tight").mkdir()
    tight = write_scenario(
        tmp_path / "tight" / "s.yaml",
        {"a": sim.base_url("a")},
        load={"users": 4, "duration": "3s"},
        slos=[{"metric": "ttft", "stat": "p50", "max_ms": 0.5}, {"metric": "e2e", "stat": "p99", "max_ms": 60_000}],
    )
    proc = run_loadgen(tight, "--workers", "1")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = read_report(tmp_path / "tight" / "report")
    (breach,) = [s for s in report["slos"] if not s["passed"]]
    assert breach["slo"] == "ttft p50 ≤ 0.5 ms" and breach["observed_ms"] > 0.5
    assert breach["breaching_requests"] == report["variants"][0]["overall"]["metrics_ms"]["ttft"]["count"]
    out = _formats(tmp_path / "tight" / "report")
    measured = f"{breach['observed_ms']:,.1f} ms"
    assert f"a: ttft p50 ≤ 0.5 ms — measured {measured}" in out["md"]
    assert "ttft p50 ≤ 0.5 ms" in out["html"] and html.escape(measured) in out["html"]
    failures = _junit_failures(tmp_path / "tight" / "report")
    assert list(failures) == ["a: ttft p50 ≤ 0.5 ms"]
    assert "threshold ≤ 0.5 ms" in failures["a: ttft p50 ≤ 0.5 ms"]

    (tmp_path / "loose").mkdir()
    loose = write_scenario(
        tmp_path / "loose" / "s.yaml",
        {"a": sim.base_url("a")},
        load={"users": 4, "duration": "3s"},
        slos=[{"metric": "ttft", "stat": "p50", "max_ms": 60_000}],
    )
    proc = run_loadgen(loose, "--workers", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(s["passed"] for s in read_report(tmp_path / "loose" / "report")["slos"])
    _formats(tmp_path / "loose" / "report")
    assert _junit_failures(tmp_path / "loose" / "report") == {}


def test_a_blocked_worker_loop_exits_3_and_every_format_names_the_worker(tmp_path: Path, sim: Any) -> None:
    locustfile = tmp_path / "hog.py"
    locustfile.write_text(HOG, encoding="utf-8")
    scenario = write_scenario(
        tmp_path / "s.yaml",
        {"a": sim.base_url("a")},
        load={"users": 4, "duration": "4s"},
        slos=[{"metric": "ttft", "stat": "p50", "max_ms": 60_000}],
    )
    report_dir = tmp_path / "report"
    proc = subprocess.run(
        [sys.executable, "-m", "locust", "-f", str(locustfile), "--scenario", str(scenario), "--headless"]
        + ["--report-dir", str(report_dir), "--only-summary"],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 3, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = read_report(report_dir)
    (reason,) = [r for r in report["run"]["untrustworthy_reasons"] if "event-loop lag" in r]
    assert reason.startswith("worker local: event-loop lag p99 ")
    out = _formats(report_dir)
    assert reason in out["md"]
    assert html.escape(reason, quote=False) in out["html"]
    assert html.escape(reason, quote=False) in out["junit"]
    assert reason in _junit_failures(report_dir)["run trust"]
