"""The master's side of scale-out, and memory, measured in-process with realistic worker deltas.

- merge: W workers each send one report per interval: `Runtime.report_since_last()` (histogram deltas + counters +
  health) inside a Locust message (msgpack). The master unpacks each and merges it into its `Collector`; we time
  both for W = 10, 100, 1000 reports.
- memory: a worker records requests and ships a delta every interval; RSS is read as the request count grows. The
  master merges deltas standing for 10 million requests (distinct report payloads, reused) and its RSS is read as
  it goes: nothing in either should grow with the number of requests.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from typing import Any

import msgpack
import orjson
import psutil

from bench.common import fmt, print_table
from loadgen.locust_plugin.runtime import Collector
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.health import HealthStats
from loadgen.measure.records import RequestRecord

_REQ_PER_REPORT = 300  # a worker at 100 req/s with Locust's 3 s report interval


def _record(rng: random.Random, i: int, chunks: int, mix: str = "chat") -> RequestRecord:
    sent = 1000.0 + i * 0.01
    r = RequestRecord(f"w-{i}", "baseline", mix, "short", sent=sent)
    t = sent + rng.lognormvariate(-3.5, 0.6)  # TTFT ~30 ms, long tail
    itl = rng.uniform(0.008, 0.03)
    for _ in range(chunks):
        r.chunk_times.append(t)
        r.chunk_tokens.append(1)
        t += rng.expovariate(1 / itl)
    r.done = t
    r.output_tokens = chunks
    r.prompt_tokens = rng.randint(50, 2000)
    if rng.random() < 0.01:
        r.error = "http_5xx"
    return r


_MIXES = ("chat", "rag", "code")


def worker_reports(n: int, seed: int = 1, chunks: int = 64, mixes: int = 1, hists: bool = True) -> list[bytes]:
    """`n` distinct worker report messages as the master receives them (msgpack, as Locust's protocol sends).
    Each holds 300 requests of one variant over `mixes` traffic mixes (one histogram set per mix)."""
    rng = random.Random(seed)
    out = []
    for w in range(n):
        agg = Aggregate()
        health = HealthStats()
        for i in range(_REQ_PER_REPORT):
            agg.add(
                _record(rng, i, rng.randint(chunks // 2, chunks), _MIXES[i % mixes]),
                1_700_000_000.0 + w % 3 + i / _REQ_PER_REPORT * 3,
            )
        for _ in range(60):
            health.add_lag(rng.expovariate(1000))
        health.add_cpu(rng.uniform(10, 60))
        # Between two shipments of its aggregate (histograms with their counters) a worker ships its health alone.
        payload = {"loadgen": {"health": health.to_wire(), **({"agg": agg.pop_delta()} if hists else {})}}
        out.append(msgpack.dumps(("stats", payload, f"worker-{w}")))
    return out


def merge_cost(
    counts: tuple[int, ...] = (10, 100, 1000), distinct: int = 40, mixes: int = 1, rounds: int = 7
) -> list[dict[str, Any]]:
    """Master CPU for one report interval (steady state; the median of `rounds`). With many workers × mixes each
    worker ships its histograms every few reports (staggered; `locust_plugin.plugin.hist_every`), health every
    report: that is what is timed."""
    from loadgen.locust_plugin.plugin import hist_every

    full = worker_reports(distinct, mixes=mixes)
    lean = worker_reports(distinct, mixes=mixes, hists=False)
    rows = []
    for w in counts:
        col = Collector()
        every = hist_every(w, mixes)
        batch = [(full if i % every == 0 else lean)[i % distinct] for i in range(w)]
        # The first interval also allocates each worker's health record; the steady state is every later one.
        for i, m in enumerate(batch):
            col.merge_report(f"worker-{i}", msgpack.loads(m, raw=False, strict_map_key=False)[1]["loadgen"])
        # The median of `rounds` intervals: one interval on a shared VM varies by tens of percent.
        unpack, merge = [], []
        for _ in range(rounds):
            gc.collect()  # what earlier sizes left behind is not this interval's cost
            t0 = time.perf_counter()
            decoded = [msgpack.loads(m, raw=False, strict_map_key=False) for m in batch]
            t1 = time.perf_counter()
            for i, (_, data, _) in enumerate(decoded):
                col.merge_report(f"worker-{i}", data["loadgen"])
            t2 = time.perf_counter()
            unpack.append((t1 - t0) * 1e3)
            merge.append((t2 - t1) * 1e3)
        rows.append(
            {
                "workers": w,
                "mixes": mixes,
                "hist_every": every,
                "rounds": rounds,
                "unpack_ms": statistics.median(unpack),
                "merge_ms": statistics.median(merge),
                "merge_ms_max": max(merge),
                "bytes_per_report": sum(len(m) for m in batch) / w,
            }
        )
    return rows


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def worker_memory(total: int = 200_000, chunks: int = 16) -> list[tuple[int, float]]:
    """RSS (MB) of a process recording `total` requests, shipping a delta every 1000 (the report interval)."""
    rng = random.Random(2)
    agg = Aggregate()
    points = []
    gc.collect()
    marks = {total // 20, total // 4, total // 2, total}
    for i in range(1, total + 1):
        agg.add(_record(rng, i, chunks), 1_700_000_000.0 + i / 1000)
        if i % 1000 == 0:
            agg.pop_delta()
        if i in marks:
            gc.collect()
            points.append((i, _rss_mb()))
    return points


def master_memory(total_requests: int = 10_000_000, distinct: int = 40) -> list[tuple[int, float]]:
    """RSS (MB) of a master merging reports that stand for `total_requests` requests (300 per report)."""
    msgs = worker_reports(distinct, seed=3)
    col = Collector()
    n_reports = total_requests // _REQ_PER_REPORT
    marks = {n_reports // 100, n_reports // 10, n_reports // 2, n_reports}
    points = []
    gc.collect()
    base = _rss_mb()
    points.append((0, base))
    for i in range(1, n_reports + 1):
        _, data, _ = msgpack.loads(msgs[i % distinct], raw=False, strict_map_key=False)
        agg = data["loadgen"]["agg"]
        # Later intervals carry later seconds: the timeline grows with the run's length, one row per second.
        agg["timeline"] = [[s + (i // 10) * 3, *row] for s, *row in agg["timeline"]]
        vt = agg["variant_timeline"]
        vt["bins"] = [[v, s + (i // 10) * 3, *row] for v, s, *row in vt["bins"]]
        col.merge_report(f"worker-{i % 100}", data["loadgen"])
        if i in marks:
            gc.collect()
            points.append((i * _REQ_PER_REPORT, _rss_mb()))
    return points


def merge_table(rows: list[dict[str, Any]]) -> str:
    out = [
        [
            str(r["workers"]),
            str(r["mixes"]),
            str(r["hist_every"]),
            fmt(r["unpack_ms"], 1),
            fmt(r["merge_ms"], 1),
            fmt(r["unpack_ms"] + r["merge_ms"], 1),
            f"{r['bytes_per_report'] / 1024:.1f}",
        ]
        for r in rows
    ]
    return print_table(
        "Master merge cost per report interval (one report per worker)",
        ["workers", "mixes", "histograms every", "unpack ms", "merge ms", "total ms", "KiB/report"],
        out,
    )


def memory_table(worker: list[tuple[int, float]], master: list[tuple[int, float]]) -> str:
    out = [["worker", f"{n:,}", fmt(mb, 1)] for n, mb in worker]
    out += [["master", f"{n:,}", fmt(mb, 1)] for n, mb in master]
    growth_w = worker[-1][1] - worker[0][1] if worker else float("nan")
    growth_m = master[-1][1] - master[0][1] if master else float("nan")
    out.append(["worker growth", f"{worker[0][0]:,} → {worker[-1][0]:,}", fmt(growth_w, 1)])
    out.append(["master growth", f"0 → {master[-1][0]:,}", fmt(growth_m, 1)])
    return print_table("Memory: RSS (MB) against requests served", ["process", "requests", "RSS MB"], out)


def measure_memory_in_subprocess(kind: str, n: int) -> list[tuple[int, float]]:
    """Run `worker_memory` / `master_memory` in a fresh interpreter, so that RSS is that of this work alone."""
    import subprocess
    import sys

    from bench.common import REPO

    out = subprocess.run(
        [sys.executable, "-m", "bench.scale", kind, str(n)], cwd=REPO, capture_output=True, check=True, timeout=1800
    ).stdout
    return [(int(a), float(b)) for a, b in orjson.loads(out)]


if __name__ == "__main__":
    import sys

    kind, n = sys.argv[1], int(sys.argv[2])
    points = worker_memory(n) if kind == "worker" else master_memory(n)
    sys.stdout.buffer.write(orjson.dumps(points))
