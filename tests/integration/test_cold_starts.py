"""Cold vs warm requests end to end against the simulator: a variant's first request on a worker, its first after
it idled (nothing of it in flight) longer than `cold_starts.idle_gap`, and one that had to open a new connection are
reported apart from the warm steady state, and every request is still in the overall figures. Cold and idle are the
variant's (a scale-to-zero target sleeps when none of its streams reach it), not each stream's."""

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
            "idle": ({"a": sim.base_url("a")}, {"users": 1, "duration": "5s", "think_time": "1.2s"}, "1s"),
            # Two users whose think times overlap: each stream idles 1.2 s, the variant never idles 1 s.
            "overlap": ({"a": sim.base_url("a")}, {"users": 2, "duration": "5s", "think_time": "0.6s"}, "1s"),
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
    # The variant's first; the two other users' first requests opened their connections while it was busy.
    assert starts["first"] == 1 and starts["new_connection"] == 2 and starts["warm"] > 10
    assert set(starts) == {"first", "new_connection", "warm"}
    # Every request of the window is in exactly one state, and in the overall figures.
    assert sum(starts.values()) == steady["variants"][0]["overall"]["requests"]
    assert sum(r["cold"] == "first" for r in rows) == 1
    idle, _ = runs["idle"]
    starts = _starts(idle)
    # One user: its first, then every request after a 1.2 s think time, longer than the 1 s gap.
    assert starts["first"] == 1 and starts["idle"] >= 2 and "warm" not in starts
    overlap, _ = runs["overlap"]
    assert "idle" not in _starts(overlap) and _starts(overlap)["first"] == 1
    reconnect, rows = runs["reconnect"]
    starts = _starts(reconnect)
    cut = [r for r in rows if r["error"] is not None]
    assert cut and starts.get("new_connection", 0) > 0
    md = (tmp_path / "idle" / "report" / "report.md").read_text()
    assert "## Cold vs warm requests" in md and "cold: after an idle gap" in md and "longer than 1 s" in md
