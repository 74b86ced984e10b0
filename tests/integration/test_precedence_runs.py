"""The precedence rule (scenario file < environment < command line < web UI form; config/precedence.py) in real runs:
the command line beats the environment, which beats the file, through `loadgen run` (whose Locust processes must
not apply the environment a second time, over the command line) and through `locust -f … --headless` started by hand.
(The web UI form's layer: tests/e2e/test_web_ui_run_time_chromium.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from loadgen.config.precedence import ENV_VARS
from loadgen.locust_plugin.launcher import LOCUSTFILE
from loadgen.sim.launch import start_sim_process

from .harness import read_report, run_loadgen, write_scenario

# Judged on a shared 2-core machine: the generator's health is not what is tested here.
TRUST = {"loop_lag_p99_ms": 500, "cpu_percent_p90": 100, "schedule_slip_p99_ms": 500}


def _env(**over: str) -> dict[str, str]:
    return {**{k: v for k, v in os.environ.items() if k not in ENV_VARS}, **over}


def test_loadgen_run_command_line_over_environment_over_file(tmp_path: Path) -> None:
    with start_sim_process(["a=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml", {"a": sim.base_url("a")}, load={"users": 2, "duration": "30s"}, run_trust=TRUST
        )
        proc = run_loadgen(
            scenario,
            "--workers",
            "1",
            "--set",
            "load.duration=2s",
            env=_env(LOADGEN_DURATION="20s", LOCUST_RUN_TIME="20", LOCUST_USERS="3"),
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    assert report["run"]["users"] == 3  # LOCUST_USERS over the file's 2
    assert report["run"]["window_s"] < 4  # --set load.duration=2s over the environment's 20 s and the file's 30 s
    as_run = (tmp_path / "report" / "scenario-as-run.yaml").read_text(encoding="utf-8")
    assert "LOCUST_USERS" in as_run.splitlines()[0] and "--set load.duration" in as_run.splitlines()[0]


def test_a_locust_process_s_command_line_over_its_environment(tmp_path: Path) -> None:
    with start_sim_process(["a=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml", {"a": sim.base_url("a")}, load={"users": 2, "duration": "30s"}, run_trust=TRUST
        )
        cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario), "--headless"]
        cmd += ["--only-summary", "--report-dir", str(tmp_path / "report"), "--loadgen-duration", "2s"]
        # Locust's own -t from its variable would end the run after 20 s; loadgen's flag is the command line's.
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=_env(LOCUST_RUN_TIME="20"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert read_report(tmp_path / "report")["run"]["window_s"] < 4
