"""Many real workers, one master: what merging their reports costs the master, measured live.

`python -m bench.master_live [--workers 16,64,128] [--seconds 20] [--variants 1] [--mixes 1]`

The merge bench (`bench/run.py --parts merge,memory`) feeds a master synthetic deltas; this one runs the real
thing: `loadgen run --workers N` (N Locust worker processes and their master on this host, over loopback) against
`bench/server.py`, each worker a cheap sender (2 users with 1 s between requests, 4–8-token replies at 5 ms a
token: ~2 requests/s a worker). From the run's report
(`run.master`, the master's own accounting): reports merged, merge time per 3-s report interval (median and
largest — the largest holds the final merge of every worker's last report), the total, and the master's peak RSS;
and, sampled from outside, the master process's CPU seconds over the run. On a 2-core machine the workers share the
cores with the master (reniced below it, as a master on a node of its own would not wait for them): its merge
times here are wall times on a busy machine, an upper bound on what it needs on a node of its own.

Writes bench/results/master-live.json.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import orjson
import psutil
import yaml

from bench.common import Cores, bench_server, machine_info, write_results


def _master_cpu(proc: subprocess.Popen[str], out: dict[str, float], stop: threading.Event) -> None:
    """The Locust master's CPU seconds (user + system), last seen before it exited. The workers are reniced below
    it: a hundred worker processes on two cores (each waking ~100 times a second for its own health checks) would
    otherwise hold the master to a hundredth of a core, which measures the scheduler, not the merge."""
    master = None
    reniced: set[int] = set()
    while not stop.is_set() and proc.poll() is None:
        try:
            kids = psutil.Process(proc.pid).children(recursive=True)
            for p in kids:
                if p.pid not in reniced and "--worker" in p.cmdline():
                    p.nice(19)
                    reniced.add(p.pid)
            if master is None:
                master = next((p for p in kids if "--master-bind-port" in p.cmdline()), None)
            if master is not None:
                t = master.cpu_times()
                out["cpu_s"] = t.user + t.system
                out["rss_mb"] = max(out.get("rss_mb", 0.0), master.memory_info().rss / 2**20)
        except psutil.Error:
            pass
        time.sleep(0.25)


def run(workers: int, seconds: float, variants: int, mixes: int, base_url: str, work: Path) -> dict[str, Any]:
    mix_names = [f"m{i}" for i in range(mixes)]
    scenario = {
        "name": f"master-live-{workers}",
        "seed": 1,
        "variants": [
            {"name": f"v{i}", "base_url": base_url, "model": "bench", "continuous_usage_stats": True}
            for i in range(variants)
        ],
        "traffic": {
            "mixes": [{"name": m, "weight": 1} for m in mix_names],
            "custom_mixes": {
                m: {"buckets": [{"name": "s", "prompt_tokens": [20, 40], "weight": 1}], "output_tokens": [4, 8]}
                for m in mix_names
            },
        },
        # Two users a worker, each waiting 1 s between requests: ~2 req/s a worker, so that a hundred workers stay
        # cheap senders on two cores and what is measured is the master's merging, not a saturated machine.
        "load": {
            "users": 2 * workers,
            "spawn_rate": 1000,
            "duration": f"{seconds:g}s",
            "warmup": "2s",
            "think_time": "1s",
        },
        "slos": [],
        "report_dir": str(work / "report"),
        # The generator's own health on shared cores is not what is measured here.
        "run_trust": {"loop_lag_p99_ms": 10000, "schedule_slip_p99_ms": 10000, "cpu_percent_p90": 100},
    }
    path = work / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    cmd = [sys.executable, "-m", "loadgen.cli", "run", str(path), "--quiet", "--workers", str(workers)]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: dict[str, float] = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_master_cpu, args=(proc, seen, stop), daemon=True)
    watcher.start()
    out, err = proc.communicate(timeout=600 + 3 * workers)
    stop.set()
    watcher.join(timeout=2)
    report_file = work / "report" / "report.json"
    if not report_file.exists():
        raise RuntimeError(f"no report (exit {proc.returncode}): {out[-2000:]}{err[-2000:]}")
    report = orjson.loads(report_file.read_bytes())
    master = report["run"].get("master", {})
    requests = sum(v["overall"]["requests"] for v in report["variants"])
    return {
        "workers": workers,
        "variants": variants,
        "mixes": mixes,
        "window_s": report["run"]["window_s"],
        "requests": requests,
        "workers_reporting": len(report["run"]["workers"]),
        "lost_workers": report["run"].get("lost_workers", []),
        **master,
        "master_cpu_s": round(seen.get("cpu_s", float("nan")), 2),
        "master_rss_mb_sampled": round(seen.get("rss_mb", float("nan")), 1),
        "exit": proc.returncode,
        "wall_s": round(time.monotonic() - t0, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="16,64,128", help="comma-separated worker process counts")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--variants", type=int, default=1)
    ap.add_argument("--mixes", type=int, default=1)
    args = ap.parse_args()
    machine = machine_info()
    rows = []
    tmp = tempfile.TemporaryDirectory()
    cores = Cores("", "")  # not pinned: the master and the workers share both cores
    with tmp, bench_server(Path(tmp.name) / "server", cores, itl_ms=5.0, k=1, ttft_ms=10.0, truth=False) as server:
        for n in (int(w) for w in args.workers.split(",")):
            work = Path(tmp.name) / f"w{n}"
            work.mkdir()
            row = run(n, args.seconds, args.variants, args.mixes, server.base_url, work)
            rows.append(row)
            print(
                f"{n:4d} workers: {row['requests']} requests, {row.get('reports_merged')} reports merged, "
                f"merge per interval p50 {row.get('merge_ms_per_interval_p50')} ms, "
                f"max {row.get('merge_ms_per_interval_max')} ms, total {row.get('merge_ms_total')} ms, "
                f"master RSS peak {row.get('rss_peak_mb')} MB, master CPU {row['master_cpu_s']} s "
                f"over {row['wall_s']} s (exit {row['exit']})",
                flush=True,
            )
    print(f"(results: {write_results('master-live', {'rows': rows}, machine)})")


if __name__ == "__main__":
    main()
