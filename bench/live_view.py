"""What the web UI's LLM tab costs the master: one live summary (`loadgen.live.summary.live_summary`, recomputed at
most once a second however many pages poll) against the full report (`build_report`) for the same merged run, and
the rows built from it. `python -m bench.live_view [REQUESTS]` prints both for 1 × 1 and 10 variants × 5 mixes.
"""

from __future__ import annotations

import random
import sys
import time
from typing import Any

from bench.common import fmt, print_table
from bench.scale import _record
from loadgen.config.scenario import Scenario, validate_scenario
from loadgen.live.summary import live_summary
from loadgen.live.web_rows import extended_stats
from loadgen.measure.aggregate import Aggregate
from loadgen.report.build import build_report

_BUCKET = {"name": "s", "prompt_tokens": [30, 120], "weight": 1}


def _scenario(variants: int, mixes: int) -> Scenario:
    doc: dict[str, Any] = {
        "name": "bench",
        "variants": [{"name": f"v{i}", "base_url": "http://127.0.0.1:1", "model": "m"} for i in range(variants)],
        "traffic": {
            "mixes": [{"name": f"m{j}", "weight": 1} for j in range(mixes)],
            "custom_mixes": {f"m{j}": {"buckets": [_BUCKET], "output_tokens": [20, 60]} for j in range(mixes)},
        },
        "load": {"users": 100, "duration": "600s", "warmup": 0},
    }
    return validate_scenario(doc, source="bench")


def _aggregate(variants: int, mixes: int, requests: int) -> Aggregate:
    rng = random.Random(1)
    agg = Aggregate()
    for i in range(requests):
        r = _record(rng, i, rng.randint(16, 64), f"m{i % mixes}")
        r.variant = f"v{(i // mixes) % variants}"
        agg.add(r, 1_700_000_000.0 + i / requests * 600)
    return agg


def _best_ms(fn: Any, n: int) -> float:
    best = float("inf")
    for _ in range(n):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def main(requests: int = 50_000) -> str:
    rows = []
    run = {"workers": {}, "untrustworthy_reasons": [], "duration_s": 600}
    for variants, mixes in ((1, 1), (10, 5)):
        sc, agg = _scenario(variants, mixes), _aggregate(variants, mixes, requests)
        summary = live_summary(sc, agg, 600.0, dict(run))
        live = _best_ms(lambda: live_summary(sc, agg, 600.0, dict(run)), 5)  # noqa: B023
        tab = _best_ms(lambda: extended_stats(summary), 5)  # noqa: B023
        full = _best_ms(lambda: build_report(sc, agg, 600.0, dict(run)), 1)  # noqa: B023
        rows.append([f"{variants} × {mixes}", str(requests), fmt(live), fmt(tab, 2), fmt(full, 0)])
    return print_table(
        "web UI LLM tab: master cost per refresh (best of 5; full report: once)",
        ["variants × mixes", "requests", "live summary ms", "rows ms", "full report ms"],
        rows,
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000)
