"""`loadgen run` for real (a Locust process against the simulator): it prints the report this run wrote, never one
left in the report folder by an earlier run, and keeps the old one aside."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from loadgen.sim.launch import start_sim_process

from .harness import write_scenario


def test_run_replaces_a_stale_report_and_prints_only_its_own(tmp_path: Path) -> None:
    report_dir = tmp_path / "report"
    report_dir.mkdir()
    (report_dir / "report.md").write_text("# STALE REPORT from an earlier run\n", encoding="utf-8")
    (report_dir / "report.json").write_bytes(orjson.dumps({"scenario": "stale", "exit_code": 0}))
    with start_sim_process(["baseline"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"baseline": sim.base_url("baseline")},
            name="fresh-run",
            load={"users": 2, "duration": "3s"},
        )
        proc = subprocess.run(
            [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--workers", "0"],
            capture_output=True,
            text=True,
            timeout=120,
        )
    # The verdict is not the point here (a busy shared CI core may even make it 3); that the report is this run's is.
    assert "# loadgen report — fresh-run" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "STALE REPORT" not in proc.stdout
    assert proc.returncode == orjson.loads((report_dir / "report.json").read_bytes())["exit_code"]
    assert orjson.loads((report_dir / "report.json").read_bytes())["scenario"] == "fresh-run"
    assert (report_dir / "report.previous.md").read_text(encoding="utf-8").startswith("# STALE REPORT")
    assert orjson.loads((report_dir / "report.previous.json").read_bytes())["scenario"] == "stale"
