"""Sequential variants in a Locust run of its own, as the Helm chart and `loadgen k8s run` start one: a headless master
(`--master --headless --expect-workers 2`) and two `--worker` processes, the commands of
charts/loadgen/templates/master-job.yaml and workers-job.yaml (loadgen/k8s/run_objects.yaml), against the simulator.

The master runs the variants one after another with the same two workers, each a phase with its own warm-up, window
and drain, and writes one report: the report `loadgen run` writes for the same scenario (same sections, same facts
for each phase), with each variant's requests counted by the fate table, and the second variant's requests sent
after the first variant's last one ended (raw records, one monotonic clock on this machine).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from loadgen.locust_plugin.launcher import LOCUSTFILE, free_port
from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, run_loadgen, write_scenario

PAUSE_S = 1.0


def _scenario(tmp: Path, sim: Any) -> Path:
    return write_scenario(
        tmp / "s.yaml",
        {"slow": sim.base_url("slow"), "fast": sim.base_url("fast")},
        load={"users": 4, "duration": "3s", "warmup": "0.5s", "sequential": True, "sequential_pause": "1s"},
        slos=[{"metric": "ttft", "stat": "p50", "max_ms": 60_000}],
        # Judged on a shared 2-core machine: the verdict on the generator's health is not what is tested here.
        run_trust={"loop_lag_p99_ms": 500, "cpu_percent_p90": 100, "schedule_slip_p99_ms": 500},
    )


def _as_the_chart_starts_them(scenario: Path, out: Path) -> tuple[int, str]:
    """The master Job's and the workers Job's Locust commands (their flags as the chart renders them, the port and
    host local); the master's exit code and log."""
    port = free_port()
    base = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--scenario",
        str(scenario),
        "--report-dir",
        str(out),
    ]
    raw = ["--raw-records", str(out.parent / "raw")]
    master = subprocess.Popen(
        [*base, *raw, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)]
        + ["--headless", "--only-summary", "--expect-workers", "2", "--expect-workers-max-wait", "120"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    workers = [
        subprocess.Popen(
            [*base, *raw, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    try:
        _, err = master.communicate(timeout=180)
        for w in workers:
            assert w.wait(timeout=60) == 0, "a worker did not end with its master"
    finally:
        for p in (master, *workers):
            if p.poll() is None:
                p.kill()
    return master.returncode, err


def _shape(value: Any, depth: int = 0) -> Any:
    """The keys of a report, nested (two levels into lists of dicts): what two reports of one scenario share."""
    if isinstance(value, dict) and depth < 4:
        return {k: _shape(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return [_shape(value[0], depth + 1)]
    return type(value).__name__


def test_a_master_and_two_workers_run_the_variants_in_turn(tmp_path: Path) -> None:
    with start_sim_process(["slow=baseline", "fast=int8"]) as sim:
        scenario = _scenario(tmp_path, sim)
        code, log = _as_the_chart_starts_them(scenario, tmp_path / "report")
        # The same scenario through `loadgen run` (one Locust run per variant): the report to match.
        local = run_loadgen(scenario, "--workers", "1", "--report-dir", str(tmp_path / "local"))
    assert code == 0, log[-4000:]
    assert local.returncode == 0, local.stderr[-3000:]
    assert "sequential: variant 'slow' (1 of 2)" in log and "pausing 1s before variant 'fast'" in log

    report = read_report(tmp_path / "report")
    run = report["run"]
    assert run["sequential"] is True and [p["variant"] for p in run["phases"]] == ["slow", "fast"]
    # Each phase: its own warm-up and window (3 s - 0.5 s), its own two workers.
    assert all(p["exit_code"] == 0 and 2.0 < p["window_s"] < 3.2 for p in run["phases"]), run["phases"]
    assert set(run["workers"]) == {f"{v}/worker-{i}" for v in ("slow", "fast") for i in (0, 1)}
    assert run["lost_workers"] == []
    for i, v in enumerate(("slow", "fast")):
        phase = tmp_path / "report" / "phases" / f"{i + 1}-{v}"
        assert (phase / "report.json").exists() and (phase / "aggregate.json").exists()
        assert (phase / "scenario.yaml").exists()
    # The report `loadgen run` writes, section for section (its one worker's facts as each of these two's).
    ours, theirs = _shape(report), _shape(read_report(tmp_path / "local"))
    ours_workers, theirs_workers = ours["run"].pop("workers"), theirs["run"].pop("workers")
    assert ours == theirs
    assert all(w == next(iter(theirs_workers.values())) for w in ours_workers.values())

    records = read_records(tmp_path / "raw")
    by_variant = {n: [r for r in records if r["variant"] == n] for n in ("slow", "fast")}
    for v in report["variants"]:
        fates = v["overall"]["fates"]
        # Every request of the variant's phase has its one fate: the table counts each raw record once.
        assert sum(fates.values()) == len(by_variant[v["name"]]) > 10, (v["name"], fates)
        assert fates.get("succeeded", 0) > 10 and fates.get("in_warmup", 0) > 0, fates
        assert v["window_s"] == next(p["window_s"] for p in run["phases"] if p["variant"] == v["name"])
    # One after another: the fast variant's first request went out after the slow one's last ended, and the pause.
    first_fast = min(r["sent"] for r in by_variant["fast"])
    assert first_fast > max(r["done"] for r in by_variant["slow"] if r["done"] is not None) + PAUSE_S * 0.9
    # Paired: the k-th request of a user's stream is the same request in both phases.
    lengths = {
        n: {tuple(r["id"].rsplit("-", 2)[1:]): (r["prompt_tokens_target"], r["max_tokens"]) for r in rs}
        for n, rs in by_variant.items()
    }
    common = set(lengths["slow"]) & set(lengths["fast"])
    assert len(common) > 10 and all(lengths["slow"][k] == lengths["fast"][k] for k in common)


def _headless_alone(scenario: Path, out: Path) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario), "--headless"]
    cmd += ["--only-summary", "--report-dir", str(out)]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def test_a_lone_headless_process_runs_them_in_turn_and_a_sigterm_fails_the_run(tmp_path: Path) -> None:
    with start_sim_process(["slow=baseline", "fast=int8"]) as sim:
        scenario = _scenario(tmp_path, sim)
        proc = _headless_alone(scenario, tmp_path / "report")
        _, log = proc.communicate(timeout=120)
        assert proc.returncode == 0, log[-4000:]
        run = read_report(tmp_path / "report")["run"]
        assert [p["variant"] for p in run["phases"]] == ["slow", "fast"] and set(run["workers"]) == {
            "slow/local",
            "fast/local",
        }
        # Stopped from outside in its first phase (an evicted pod, a deleted Job): that phase reports, interrupted, in
        # its own folder; no report of both variants, which did not both run; the run failed (exit 4).
        long = write_scenario(
            tmp_path / "long.yaml",
            {"slow": sim.base_url("slow"), "fast": sim.base_url("fast")},
            load={"users": 2, "duration": "60s", "sequential": True},
        )
        proc = _headless_alone(long, tmp_path / "cut")
        phase = tmp_path / "cut" / "phases" / "1-slow"
        deadline = time.monotonic() + 60
        while not (phase / "scenario.yaml").exists():
            assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.2)
        time.sleep(2)
        proc.send_signal(signal.SIGTERM)
        _, log = proc.communicate(timeout=60)
    assert proc.returncode == 4, log[-4000:]
    assert "the sequential run was stopped in variant 'slow'" in log
    assert read_report(phase)["run"]["interrupted"] is True
    assert not (tmp_path / "cut" / "report.json").exists()
    assert not (tmp_path / "cut" / "phases" / "2-fast" / "report.json").exists()
