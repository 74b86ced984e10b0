"""What one Prometheus scrape of the master's exporter costs (loadgen/live/exporter.py): 10 variants × 5 mixes, each
group's TTFT / ITL / TPOT / E2E histograms filled with 2,000 requests of realistic spread, 4 workers' health.

- `cold`: every histogram changed since the last scrape (the worst case: right after every group merged a delta);
- `warm`: nothing changed (scrapes between the workers' reports reuse the walk);
both times the whole text exposition the /metrics route serves, formatting included. Target: ≤ 10 ms.

    python -m bench.exporter
"""

from __future__ import annotations

import random
import statistics
import time

from bench.common import machine_info, write_results
from loadgen.config.live_metrics import DEFAULT_BUCKETS_S
from loadgen.live.exporter import LiveView, MetricsText
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.health import HealthStats, HealthThresholds

VARIANTS, MIXES, REQUESTS = 10, 5, 2000


def _aggregate(rng: random.Random) -> Aggregate:
    agg = Aggregate()
    for v in range(VARIANTS):
        for m in range(MIXES):
            g = agg.group(f"variant-{v}", f"mix-{m}")
            g.requests = g.ok = REQUESTS
            for _ in range(REQUESTS):
                g._hist("ttft").record(rng.lognormvariate(-2.0, 0.8))
                g._hist("e2e").record(rng.lognormvariate(1.0, 0.6))
                g._hist("tpot").record(rng.lognormvariate(-4.0, 0.3))
            for _ in range(REQUESTS * 20):  # ITL: per token, many more samples
                g._hist("itl").record(rng.lognormvariate(-4.0, 0.5))
    return agg


def main() -> None:
    rng = random.Random(1)
    agg = _aggregate(rng)
    health = {f"worker-{i}": HealthStats() for i in range(4)}
    for h in health.values():
        for _ in range(500):
            h.add_lag(rng.expovariate(1000))
        h.add_cpu(40.0)
    view = LiveView(agg, health, "bench", 1, HealthThresholds())
    text = MetricsText(lambda: view, DEFAULT_BUCKETS_S)
    text.render()  # builds the HDR layout once per exporter
    times: dict[str, list[float]] = {"cold": [], "warm": [], "cold_cpu": [], "warm_cpu": []}

    def timed(kind: str) -> bytes:
        w, c = time.perf_counter(), time.process_time()
        out = text.render()
        times[f"{kind}_cpu"].append((time.process_time() - c) * 1e3)
        times[kind].append((time.perf_counter() - w) * 1e3)
        return out

    for _ in range(25):
        for g in agg.groups.values():  # one sample more in every histogram: each one must be walked again
            for h in g.hists.values():
                h.record(0.05)
        body = timed("cold")
        timed("warm")
    results: dict[str, float | int] = {
        "groups": VARIANTS * MIXES,
        "buckets": len(DEFAULT_BUCKETS_S),
        "body_bytes": len(body),
        "samples": sum(1 for line in body.splitlines() if line and not line.startswith(b"#")),
    }
    # Wall time on a shared machine includes other processes' turns on the core; CPU time is the scrape's own cost.
    for kind, values in times.items():
        results[f"{kind}_ms_median"] = round(statistics.median(values), 2)
        results[f"{kind}_ms_p90"] = round(sorted(values)[int(0.9 * len(values))], 2)
    results["target_ms"] = 10.0
    for k, v in results.items():
        print(f"{k:16} {v}")
    print(write_results("exporter", results, machine_info()))


if __name__ == "__main__":
    main()
