"""The variants' power and GPU memory on the master: each variant's `power` / `gpu_memory` query of the cluster
Prometheus read over the measured window (the stop back by the report's window_s: the seconds its tokens are
counted over) into the report's `variants[].cost_energy`, with the server's own KV-cache use beside it; read once
the run ended, then kept (live/variant_power.py reads, report/cost.py computes)."""

from __future__ import annotations

import time
from typing import Any

from locust.env import Environment

from loadgen.live.variant_power import kv_usage, variant_power
from loadgen.locust_plugin.runtime import runtime_of

__all__ = ["attach_cost_energy"]


def attach_cost_energy(environment: Environment, report: dict[str, Any]) -> None:
    """Fill each variant's `cost_energy` energy / gpu_memory / kv over the run's measured window so far."""
    rt = runtime_of(environment)
    col = rt.collector
    if col is None or col.started_wall is None:
        return
    entries = {v["name"]: v for v in report["variants"] if v.get("cost_energy")}
    if not entries:
        return
    ended = col.stopped_wall is not None and col.flushed
    end = col.stopped_wall if col.stopped_wall is not None else time.time()
    start = end - float(report["run"]["window_s"])
    cached = rt.cost_energy_final
    if cached is not None and cached[0] == col.run:
        read = cached[1]
    else:
        cfg = rt.scenario.metrics.prometheus
        read = {}
        for v in rt.scenario.variants:
            entry = entries.get(v.name)
            if entry is not None and cfg is not None and start < end:
                read[v.name] = variant_power(cfg, v, start, end, int(entry["cost_energy"]["output_tokens"]))
        if ended:
            rt.cost_energy_final = (col.run, read)
    for name, entry in entries.items():
        entry["cost_energy"] |= read.get(name, {})
        entry["cost_energy"]["kv"] = kv_usage(entry.get("server_metrics"), start, end)
