"""Rendering every report format from a big run: 10 variants × 5 mixes merged from 1,000 workers.

`python -m bench.render [--workers 1000] [--variants 10] [--mixes 5]`

Each worker's delta holds requests of every variant and mix (8 per group, 64-token streams, 1 % failures; 20 distinct
deltas reused, so building them stays quick). The master merges the 1,000 deltas into one `Aggregate` (the figure the
merge bench also gives), then the report is built once (`build_report`: percentiles, CDF points, SLOs, the paired
comparison's bootstrap) and rendered in every registered format from its JSON. The target (issue 12): every format
≤ 2 s and ≤ 200 MB. Peak RSS is the process's high-water mark after the step (`ru_maxrss`), so it includes building
the synthetic deltas; the RSS growth of each step is given too. Writes bench/results/render.json.
"""

from __future__ import annotations

import argparse
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson
import psutil

from loadgen.config.scenario import validate_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import RequestRecord
from loadgen.report import build_report
from loadgen.report.combine import _text
from loadgen.report.formats import formats

_PER_GROUP = 8


def _scenario(variants: int, mixes: int) -> Any:
    return validate_scenario(
        {
            "name": "render-bench",
            "variants": [
                {"name": f"v{i}", "base_url": f"http://127.0.0.1:{9000 + i}", "model": "m"} for i in range(variants)
            ],
            "traffic": {
                "mixes": [{"name": f"m{j}"} for j in range(mixes)],
                "custom_mixes": {
                    f"m{j}": {"buckets": [{"name": "s", "prompt_tokens": [50, 500]}], "output_tokens": [32, 64]}
                    for j in range(mixes)
                },
            },
            "goodput": {"ttft_ms": 100, "tpot_ms": 30},
        }
    )


def _delta(rng: random.Random, variants: int, mixes: int, base: float) -> dict[str, Any]:
    agg = Aggregate()
    n = 0
    for v in range(variants):
        for m in range(mixes):
            for k in range(_PER_GROUP):
                sent = base + n * 0.003
                r = RequestRecord(f"w-v{v}-{k}-{n}", f"v{v}", f"m{m}", "s", sent=sent)
                t = sent + rng.lognormvariate(-3.5, 0.6)
                for _ in range(rng.randint(32, 64)):
                    r.chunk_times.append(t)
                    r.chunk_tokens.append(1)
                    t += rng.expovariate(1 / 0.02)
                r.done = t
                r.output_tokens = len(r.chunk_times)
                r.prompt_tokens = rng.randint(50, 500)
                if rng.random() < 0.01:
                    r.error = "http_5xx"
                r.goodput_misses = () if r.error is None and (r.ttft or 0) < 0.1 else None
                agg.add(r, 1_700_000_000.0 + n * 0.003)
                n += 1
    return agg.pop_delta()


def _rss_mb() -> float:
    return psutil.Process().memory_info().rss / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    from bench.common import machine_info, write_results

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=1000)
    ap.add_argument("--variants", type=int, default=10)
    ap.add_argument("--mixes", type=int, default=5)
    ap.add_argument("--deltas-out", default=None, help=argparse.SUPPRESS)  # the child that builds the deltas
    args = ap.parse_args()
    if args.deltas_out:
        rng = random.Random(7)
        deltas = [_delta(rng, args.variants, args.mixes, 1000.0 + d) for d in range(20)]
        Path(args.deltas_out).write_bytes(orjson.dumps(deltas, default=_text))
        return
    machine = machine_info()
    scenario = _scenario(args.variants, args.mixes)
    with tempfile.TemporaryDirectory() as tmp:
        # Built in a child: recording the synthetic requests allocates (and fragments) far more than the master
        # ever holds, which would hide the master's own high-water mark.
        path = Path(tmp) / "deltas.json"
        cmd = [sys.executable, "-m", "bench.render", "--deltas-out", str(path)]
        subprocess.run([*cmd, "--variants", str(args.variants), "--mixes", str(args.mixes)], check=True)
        deltas = orjson.loads(path.read_bytes())
    rows: dict[str, Any] = {
        "workers": args.workers,
        "variants": args.variants,
        "mixes": args.mixes,
        "rss_before_mb": round(_rss_mb(), 1),
    }

    def step(name: str, fn: Any) -> Any:
        before = _rss_mb()
        t0 = time.perf_counter()
        out = fn()
        rows[name] = {
            "s": round(time.perf_counter() - t0, 3),
            "rss_growth_mb": round(_rss_mb() - before, 1),
            "peak_rss_mb": round(_peak_mb(), 1),
        }
        return out

    def merge() -> Aggregate:
        agg = Aggregate()
        for w in range(args.workers):
            agg.merge_wire(deltas[w % len(deltas)])
        return agg

    agg = step("merge", merge)
    report = step("build_report", lambda: build_report(scenario, agg, 60.0, {"workers": {}}))
    sizes: dict[str, int] = {}
    total = 0.0
    for name in formats().names():
        fmt = formats().get(name)
        if fmt.render is None:
            continue  # csv renders raw shards, not the report
        text = step(f"render_{name}", lambda fmt=fmt: fmt.render(report))
        sizes[name] = len(text.encode())
        total += rows[f"render_{name}"]["s"]
    rows["render_all_s"] = round(total, 3)
    rows["sizes_bytes"] = sizes
    for name, row in rows.items():
        if isinstance(row, dict) and "s" in row:
            rss = f"RSS +{row['rss_growth_mb']:6.1f} MB   peak {row['peak_rss_mb']:6.1f} MB"
            print(f"{name:20s} {row['s']:7.3f} s   {rss}")
    kb = ", ".join(f"{k} {v / 1024:.0f} KB" for k, v in sizes.items())
    print(f"{'every format':20s} {total:7.3f} s   (sizes: {kb})")
    print(f"(results: {write_results('render', rows, machine)})")


if __name__ == "__main__":
    main()
