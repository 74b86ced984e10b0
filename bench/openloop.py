"""Open-loop precision and spawn stall: does loadgen send each arrival at its time, and do users spawn without
holding up the loop?

`python -m bench.openloop [--rates 1000,5000] [--seconds 10] [--spawn-users 1000] [--target bench|sim] [--sittings N]`

- **precision** rows: one worker process (`loadgen run --workers 1`, plus its master) sends a Poisson schedule of R
  requests/s (20–40-token prompts, 4–8-token outputs, 512 senders, so no arrival waits for a free sender while the
  target keeps up). Send lag is the report's queue delay (sent − scheduled, over the measured window); schedule
  slip is the dispatcher's own lateness (handed out − scheduled, warm-up included), both as the worker measured
  them. The target: at 1,000 req/s, send lag p99 ≤ 1 ms; at 5,000 req/s the run reports the lag honestly and, when
  it could not keep up, marks itself untrustworthy (`run.trustworthy`, with the reason).
  The default target is `bench/server.py` (fixed 10 ms TTFT and 5 ms per token, no batch limit, pinned to core 0
  with loadgen on core 1): the simulator's own cost model admits 64 sequences per variant, about 1,100 of these
  requests/s, so at 1,000 req/s it is the simulator that queues and senders wait for its replies (`--target sim`
  shows it).
- **spawn** row: 1,000 closed-loop users spawned at 500 users/s (2 s of spawning, each user building its request
  stream, sampler fork and connection), think time 2 s: the loop-lag p99 / max the worker measured over the run,
  spawn included (`--spawn-users 0`: no spawn row).

`--sittings N` runs the rates N times in turn and adds each rate's spread over them (this VM's speed swings between
sittings). Writes bench/results/openloop.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import yaml

from loadgen.sim.launch import start_sim_process

# With the bench server: the worker process alone on core 1, the bench server and loadgen's master on core 0
# (the master's merging and its GC would otherwise take the worker's core from it, which is the lag measured).
_PIN_WORKER: set[int] | None = None
_WORKERS = "1"


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
    cmd = [sys.executable, "-m", "loadgen.cli", "run", str(path), "--quiet", "--workers", _WORKERS]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if _PIN_WORKER is not None:
        pin_worker(proc.pid, _PIN_WORKER, t0 + 20)
    out, err = proc.communicate(timeout=timeout)
    wall = time.monotonic() - t0
    report_file = directory / "report" / "report.json"
    if not report_file.exists():
        raise RuntimeError(f"no report (exit {proc.returncode}): {out[-2000:]}{err[-2000:]}")
    return orjson.loads(report_file.read_bytes()), wall


def pin_worker(pid: int, cpus: set[int], deadline: float, others: set[int] | None = None) -> int:
    """Move the run's Locust worker process (a grandchild) onto `cpus`, the rest of the tree onto `others` (default:
    every other CPU); returns the worker's pid."""
    import psutil

    if others is None:
        others = set(range(os.cpu_count() or 1)) - cpus or cpus
    while time.monotonic() < deadline:
        tree = psutil.Process(pid).children(recursive=True)
        workers = [p for p in tree if "--worker" in p.cmdline()]
        if workers:
            for p in [psutil.Process(pid), *tree]:
                p.cpu_affinity(sorted(cpus if p in workers else others))
            return workers[0].pid
        time.sleep(0.05)
    raise RuntimeError("the run's worker process did not start")


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


@contextlib.contextmanager
def _target(kind: str, tmp: Path) -> Iterator[str]:
    if kind == "sim":
        with start_sim_process(["a=int8"]) as sim:
            yield sim.base_url("a")
        return
    from bench.common import Cores, bench_server

    global _PIN_WORKER
    cores = Cores()
    _PIN_WORKER = {int(cores.client)}
    with bench_server(tmp / "server", Cores(), itl_ms=5.0, k=1, ttft_ms=10.0, truth=False) as server:
        yield server.base_url


def _spread(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per rate over the sittings: the range of the achieved rate and of the send lag and slip p99, and how many
    sittings the run judged itself trustworthy."""
    out: dict[str, dict[str, Any]] = {}
    for rate in dict.fromkeys(r["rate"] for r in rows):
        mine = [r for r in rows if r["rate"] == rate]
        span = {
            "achieved_rate_per_s": [r["achieved_rate_per_s"] for r in mine],
            "send_lag_p99_ms": [r["send_lag_ms"]["p99"] for r in mine],
            "schedule_slip_p99_ms": [r["schedule_slip_ms"]["p99"] for r in mine],
        }
        out[f"{rate:g}"] = {
            "sittings": len(mine),
            **{k: [min(v), max(v)] for k, v in span.items() if None not in v},
            "trustworthy": sum(1 for r in mine if r["trustworthy"]),
        }
    return out


def main() -> None:
    from bench.common import machine_info, write_results

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", default="1000,5000", help="comma-separated scheduled rates (requests/s)")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured window per rate")
    ap.add_argument("--spawn-users", type=int, default=1000, help="the spawn row's users (0: no spawn row)")
    ap.add_argument("--target", choices=("bench", "sim"), default="bench", help="bench/server.py or the simulator")
    ap.add_argument("--workers", default="1", help="loadgen run --workers (0: master and worker in one process)")
    ap.add_argument("--sittings", type=int, default=1, help="run the rates this many times in turn (the spread)")
    args = ap.parse_args()
    global _WORKERS
    _WORKERS = args.workers
    machine = machine_info()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, _target(args.target, Path(tmp)) as url:
        for sitting, rate in ((i, float(r)) for i in range(args.sittings) for r in args.rates.split(",")):
            d = Path(tmp) / f"rate-{rate:g}-{sitting}"
            d.mkdir()
            row = {"sitting": sitting + 1, **precision(rate, args.seconds, url, d)}
            rows.append(row)
            lag, slip = row["send_lag_ms"], row["schedule_slip_ms"]
            print(
                f"open loop {rate:>6g} req/s: achieved {row['achieved_rate_per_s']} ({row['achieved_share']}), "
                f"send lag p50 {lag['p50']} p99 {lag['p99']} max {lag['max']} ms, slip p99 {slip['p99']} ms, "
                f"loop lag p99 {row['loop_lag_p99_ms']} ms, worker CPU mean {row['worker_cpu_percent']['mean']} %, "
                f"trustworthy {row['trustworthy']}"
                + (f" — {'; '.join(row['untrustworthy_reasons'])}" if row["untrustworthy_reasons"] else "")
            )
        spawned = None
        if args.spawn_users > 0:  # 0: the precision rows alone
            d = Path(tmp) / "spawn"
            d.mkdir()
            spawned = spawn(args.spawn_users, url, d)
            lag = spawned["loop_lag_ms"]
            print(
                f"spawn {spawned['users']} users at 500/s: loop lag p50 {lag['p50']} p99 {lag['p99']} "
                f"max {lag['max']} ms ({spawned['requests']} requests)"
            )
    results = {"target": args.target, "precision": rows, "spread": _spread(rows), "spawn": spawned}
    print(f"(results: {write_results('openloop', results, machine)})")


if __name__ == "__main__":
    main()
