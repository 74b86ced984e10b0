"""Open-loop precision and spawn stall: does loadgen send each arrival at its time, and do users spawn without
holding up the loop?

`python -m bench.openloop [--rates 1000,5000] [--seconds 10] [--spawn-users 1000]`

- **precision** rows: one worker process (`loadgen run --workers 1`, plus its master) sends a Poisson schedule of R
  requests/s to the simulator (one `int8` variant, 20–40-token prompts, 4–8-token outputs, 512 senders, so no
  arrival waits for a free sender). Send lag is the report's queue delay (sent − scheduled, over the measured window);
  schedule slip is the dispatcher's own lateness (handed out − scheduled), both as the worker measured them. The
  target: at 1,000 req/s, send lag p99 ≤ 1 ms; at 5,000 req/s the run reports the lag honestly and, when it could
  not keep up, marks itself untrustworthy (`run.trustworthy`, with the reason).
- **spawn** row: 1,000 closed-loop users spawned at 500 users/s (2 s of spawning, each user building its request
  stream, sampler fork and connection), think time 2 s, against the simulator: the loop-lag p99 / max the worker
  measured over the run, spawn included.

The simulator runs in its own process; on a 2-core machine it shares the cores with the worker and the master, so
at the highest rates the simulator's own speed can be the limit: the rows give the achieved rate and the
simulator's CPU so that is visible. Writes bench/results/openloop.json.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import yaml

from loadgen.sim.launch import start_sim_process

_MIX = {
    "tiny": {
        "buckets": [{"name": "s", "prompt_tokens": [20, 40], "weight": 1}],
        "output_tokens": [4, 8],
    }
}


def _run(scenario: dict[str, Any], directory: Path, timeout: float) -> tuple[dict[str, Any], float]:
    """Run `scenario` headless on one worker; the report and the wall time of the whole run."""
    path = directory / "scenario.yaml"
    scenario["report_dir"] = str(directory / "report")
    path.write_text(yaml.safe_dump(scenario))
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "run", str(path), "--quiet", "--workers", "1"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    wall = time.monotonic() - t0
    report_file = directory / "report" / "report.json"
    if not report_file.exists():
        raise RuntimeError(f"no report (exit {proc.returncode}): {proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return orjson.loads(report_file.read_bytes()), wall


def _worker_health(report: dict[str, Any]) -> dict[str, Any]:
    workers = report["run"]["workers"]
    return next(iter(workers.values())) if isinstance(workers, dict) else workers[0]


def precision(rate: float, seconds: float, base_url: str, directory: Path) -> dict[str, Any]:
    scenario = {
        "name": f"openloop-{rate:g}",
        "seed": 1,
        "variants": [{"name": "a", "base_url": base_url, "model": "loadgen-sim", "continuous_usage_stats": True}],
        "traffic": {"mixes": [{"name": "tiny"}], "custom_mixes": _MIX},
        "load": {
            "users": 512,
            "spawn_rate": 5000,
            "duration": f"{seconds + 2:g}s",
            "warmup": "2s",
            "arrival": {"kind": "poisson", "rate": rate},
        },
        "slos": [],
    }
    report, wall = _run(scenario, directory, timeout=seconds * 6 + 60)
    v = report["variants"][0]
    qd = v["overall"]["metrics_ms"]["queue_delay"]
    health = _worker_health(report)
    slip = health.get("schedule_slip_ms", {})
    o = v["open_loop"]
    return {
        "rate": rate,
        "window_s": report["run"]["window_s"],
        "achieved_rate_per_s": o["achieved_rate_per_s"],
        "achieved_share": o["achieved_share"],
        "sent": o["sent"],
        "unsent_at_stop": o["unsent_at_stop"],
        "send_lag_ms": {k: qd.get(k) for k in ("p50", "p90", "p99", "max", "count")},
        "schedule_slip_ms": {k: slip.get(k) for k in ("p50", "p99", "max")},
        "loop_lag_p99_ms": health.get("loop_lag_ms", {}).get("p99"),
        "worker_cpu_percent": health.get("cpu_percent"),
        "errors": v["overall"].get("errors"),
        "trustworthy": report["run"]["trustworthy"],
        "untrustworthy_reasons": report["run"]["untrustworthy_reasons"],
        "wall_s": round(wall, 1),
    }


def spawn(users: int, base_url: str, directory: Path) -> dict[str, Any]:
    scenario = {
        "name": "spawn",
        "seed": 1,
        "variants": [{"name": "a", "base_url": base_url, "model": "loadgen-sim", "continuous_usage_stats": True}],
        "traffic": {"mixes": [{"name": "tiny"}], "custom_mixes": _MIX},
        "load": {"users": users, "spawn_rate": 500, "duration": "6s", "think_time": "2s"},
        "slos": [],
    }
    report, wall = _run(scenario, directory, timeout=120)
    health = _worker_health(report)
    lag = health.get("loop_lag_ms", {})
    return {
        "users": users,
        "spawn_rate": 500,
        "loop_lag_ms": {k: lag.get(k) for k in ("p50", "p99", "max", "count")},
        "requests": report["variants"][0]["overall"]["requests"],
        "worker_cpu_percent": health.get("cpu_percent"),
        "wall_s": round(wall, 1),
    }


def main() -> None:
    from bench.common import machine_info, write_results

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="1000,5000", help="comma-separated scheduled rates (requests/s)")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured window per rate")
    ap.add_argument("--spawn-users", type=int, default=1000)
    args = ap.parse_args()
    machine = machine_info()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, start_sim_process(["a=int8"]) as sim:
        url = sim.base_url("a")
        for rate in (float(r) for r in args.rates.split(",")):
            d = Path(tmp) / f"rate-{rate:g}"
            d.mkdir()
            row = precision(rate, args.seconds, url, d)
            rows.append(row)
            lag, slip = row["send_lag_ms"], row["schedule_slip_ms"]
            print(
                f"open loop {rate:>6g} req/s: achieved {row['achieved_rate_per_s']} ({row['achieved_share']}), "
                f"send lag p50 {lag['p50']} p99 {lag['p99']} max {lag['max']} ms, slip p99 {slip['p99']} ms, "
                f"loop lag p99 {row['loop_lag_p99_ms']} ms, trustworthy {row['trustworthy']}"
                + (f" — {'; '.join(row['untrustworthy_reasons'])}" if row["untrustworthy_reasons"] else "")
            )
        d = Path(tmp) / "spawn"
        d.mkdir()
        spawned = spawn(args.spawn_users, url, d)
        lag = spawned["loop_lag_ms"]
        print(
            f"spawn {spawned['users']} users at 500/s: loop lag p50 {lag['p50']} p99 {lag['p99']} max {lag['max']} "
            f"ms ({spawned['requests']} requests)"
        )
    print(f"(results: {write_results('openloop', {'precision': rows, 'spawn': spawned}, machine)})")


if __name__ == "__main__":
    main()
