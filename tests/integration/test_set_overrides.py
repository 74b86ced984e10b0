"""`loadgen run --set`: the run runs the overridden scenario everywhere — the master and a worker process load the
copy written beside the reports (scenario-as-run.yaml), and the report's provenance records it — against the
simulator, whose truth log says how many requests were in flight and for how long."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import read_report, run_loadgen, write_scenario


def test_a_run_uses_the_set_users_and_duration_everywhere(tmp_path: Path) -> None:
    with start_sim_process(["a=baseline"], truth_log=tmp_path / "truth.jsonl") as sim:
        # The file asks for 16 users for 20 s; the flags for 3 users for 3 s.
        scenario = write_scenario(tmp_path / "s.yaml", {"a": sim.base_url("a")}, load={"users": 16, "duration": "20s"})
        proc = run_loadgen(scenario, "--workers", "1", "--set", "load.users=3", "--set", "load.duration=3s")
        sim.stop()
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    report_dir = tmp_path / "report"
    as_run = yaml.safe_load((report_dir / "scenario-as-run.yaml").read_text(encoding="utf-8"))
    assert as_run["load"] == {"users": 3, "spawn_rate": 100, "duration": "3s", "warmup": 0}
    report = read_report(report_dir)
    assert report["scenario_doc"]["load"]["users"] == 3 and report["scenario_doc"]["load"]["duration"] == 3.0
    truth = [t for t in load_truth(tmp_path / "truth.jsonl").values() if t.arrival is not None]
    assert len(truth) > 3
    # Closed loop: never more requests in flight than users (16 would be the file's), and no request after the
    # 3 s run and its drain (generous: the file's 20 s would go far past it).
    events = sorted([(t.arrival, 1) for t in truth] + [(t.finish or t.arrival, -1) for t in truth])
    in_flight = peak = 0
    for _, step in events:
        in_flight += step
        peak = max(peak, in_flight)
    assert 1 <= peak <= 3, peak
    arrivals = [t.arrival for t in truth if t.arrival is not None]
    assert max(arrivals) - min(arrivals) < 10.0


def test_locust_f_runs_the_preflight_step_before_load(tmp_path: Path) -> None:
    # `locust -f` never passes through the CLI: the plugin itself reads the dataset before any user starts.
    from loadgen.locust_plugin.launcher import LOCUSTFILE

    missing = tmp_path / "rows.jsonl"
    scenario = write_scenario(
        tmp_path / "s.yaml",
        {"a": "http://127.0.0.1:9"},
        traffic={"mixes": [{"name": "dataset"}], "dataset": {"path": str(missing)}},
    )
    line = next(i for i, text in enumerate(scenario.read_text().splitlines(), 1) if text.strip().startswith("path:"))
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario), "--headless"]
    run = subprocess.run([*cmd, "-u", "1", "-t", "2s"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert run.returncode == 2, run.stderr[-2000:]
    assert f"{scenario}:{line}: traffic.dataset.path: {missing}: cannot read the dataset" in run.stderr, run.stderr
    assert not (tmp_path / "report" / "report.json").exists()
