"""Cold vs warm requests end to end against the simulator: each stream's first request, the first after an idle
gap longer than `cold_starts.idle_gap`, and one that had to open a new connection are reported apart from the warm
steady state, and every request is still in the overall figures."""

from __future__ import annotations

from pathlib import Path

from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, run_loadgen, write_scenario


def _starts(report: dict) -> dict[str, int]:
    return {state: b["requests"] for state, b in report["variants"][0]["starts"].items()}


def test_first_idle_and_new_connection_requests_are_cold(tmp_path: Path) -> None:
    runs = {}
    with start_sim_process(["a=int8", "b=int8"], faults={"b": {"reset_rate": 0.25}}) as sim:
        cases = {
            "steady": ({"a": sim.base_url("a")}, {"users": 3, "duration": "3s"}, None),
            "idle": ({"a": sim.base_url("a")}, {"users": 2, "duration": "5s", "think_time": "1.2s"}, "1s"),
            "reconnect": ({"b": sim.base_url("b")}, {"users": 2, "duration": "4s"}, None),
        }
        for name, (variants, load, gap) in cases.items():
            (tmp_path / name).mkdir()
            extra = {"cold_starts": {"idle_gap": gap}} if gap else {}
            scenario = write_scenario(tmp_path / name / "s.yaml", variants, load=load, slos=[], **extra)
            proc = run_loadgen(scenario, "--workers", "1", "--raw-records", str(tmp_path / name / "raw"))
            assert proc.returncode == 0, proc.stdout + proc.stderr
            runs[name] = (read_report(tmp_path / name / "report"), read_records(tmp_path / name / "raw"))
    steady, rows = runs["steady"]
    starts = _starts(steady)
    assert starts["first"] == 3 and starts["warm"] > 10 and set(starts) == {"first", "warm"}
    # Every request of the window is in exactly one state, and in the overall figures.
    assert sum(starts.values()) == steady["variants"][0]["overall"]["requests"]
    assert {r["cold"] for r in rows if r["id"].endswith("-0")} == {"first"}
    idle, _ = runs["idle"]
    starts = _starts(idle)
    # Each user: its first, then every request after a 1.2 s think time, longer than the 1 s gap.
    assert starts["first"] == 2 and starts["idle"] >= 2 and "warm" not in starts
    reconnect, rows = runs["reconnect"]
    starts = _starts(reconnect)
    cut = [r for r in rows if r["error"] is not None]
    assert cut and starts.get("new_connection", 0) > 0
    md = (tmp_path / "idle" / "report" / "report.md").read_text()
    assert "## Cold vs warm requests" in md and "cold: after an idle gap" in md and "longer than 1 s" in md
