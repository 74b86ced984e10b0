"""A run started from the web UI's Start form ends at the scenario's `load.duration` by itself, in headless Chromium.

The form's run time is prefilled from the scenario (whole seconds: the form's format); Start is clicked without
touching it, and the run must stop on its own near `load.duration` (a generous margin: this machine is shared) and
write its report like a headless run. The form is the last layer of the precedence rule (config/precedence.py):
its users and run time are what the run uses.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

from loadgen.locust_plugin.launcher import LOCUSTFILE, free_port
from loadgen.sim.launch import start_sim_process
from tests.integration.harness import read_report, write_scenario

from .browser import chromium, severe_console, wait_loaded

pytestmark = pytest.mark.e2e

DURATION_S = 6
USERS = 3


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _wait(what: str, check: Callable[[], Any], timeout: float, every: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)
    return got


@pytest.fixture
def web_ui(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """Locust's web UI on loopback over a scenario of DURATION_S seconds (one process: the form is what is tested)."""
    with start_sim_process(["a=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"a": sim.base_url("a")},
            load={"users": 2, "duration": f"{DURATION_S}s"},
            run_trust={"loop_lag_p99_ms": 500, "cpu_percent_p90": 100, "schedule_slip_p99_ms": 500},
        )
        port = free_port()
        cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario)]
        cmd += ["--report-dir", str(tmp_path / "report"), "--web-host", "127.0.0.1", "--web-port", str(port)]
        log = (tmp_path / "locust.log").open("wb")
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
        url = f"http://127.0.0.1:{port}"
        try:

            def up() -> bool:
                assert proc.poll() is None, (tmp_path / "locust.log").read_text()[-3000:]
                try:
                    return _get(url + "/stats/requests")["state"] == "ready"
                except OSError:
                    return False

            _wait("the web UI", up, 60)
            yield url, tmp_path / "report"
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()


def _field(drv: webdriver.Chrome, name: str) -> Any:
    return drv.find_element(By.CSS_SELECTOR, f"form input[name='{name}']")


def test_a_run_started_from_the_form_stops_at_load_duration(web_ui: tuple[str, Path]) -> None:
    url, report_dir = web_ui
    with chromium(loopback=True) as drv:
        drv.get(url + "/")
        wait_loaded(drv)
        form = _wait("the Start form", lambda: drv.find_elements(By.CSS_SELECTOR, "form input[name='runTime']"), 30)
        # Prefilled from the scenario: its duration, its users (the form's own defaults would be empty).
        assert form[0].get_attribute("value") == str(DURATION_S)
        assert _field(drv, "userCount").get_attribute("value") == "2"
        # The form's users are the run's (the last layer): changed here, the run time left as it is.
        users = _field(drv, "userCount")
        users.send_keys(Keys.CONTROL, "a")  # (clear() leaves a React-held field as it was)
        users.send_keys(str(USERS))
        assert users.get_attribute("value") == str(USERS)
        drv.find_element(By.CSS_SELECTOR, "form button[type='submit']").click()
        clicked = time.monotonic()
        _wait("the run to start", lambda: _get(url + "/stats/requests")["state"] in ("spawning", "running"), 30)
        stopped = _wait("the run to stop by itself", lambda: _get(url + "/stats/requests")["state"] == "stopped", 90)
        took = time.monotonic() - clicked
        assert stopped and DURATION_S - 1 <= took <= DURATION_S + 40, took
        assert severe_console(drv) == []
    report = _wait("report.json", lambda: (report_dir / "report.json").exists(), 60) and read_report(report_dir)
    run = report["run"]
    assert run["finished"] is True and run["users"] == USERS
    assert DURATION_S - 2 <= run["window_s"] <= DURATION_S + 1, run["window_s"]
    assert report["variants"][0]["overall"]["requests"] > 0
    assert (report_dir / "report.md").exists() and (report_dir / "report.html").exists()
