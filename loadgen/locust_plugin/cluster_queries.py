"""The cluster Prometheus of `metrics.prometheus` on the master: its queries evaluated over the run window into every
report the master writes or serves (they were checked before load by loadgen/preflight.py)."""

from __future__ import annotations

import time
from typing import Any

from locust.env import Environment

from loadgen.live.cluster_metrics import query_window
from loadgen.locust_plugin.runtime import runtime_of

__all__ = ["attach_cluster_metrics"]


def attach_cluster_metrics(environment: Environment, report: dict[str, Any]) -> None:
    """`cluster_metrics` over the run so far (the whole run once it ended: then read once and kept)."""
    rt = runtime_of(environment)
    cfg = rt.scenario.metrics.prometheus
    col = rt.collector
    if cfg is None or not cfg.queries or col is None or col.started_wall is None:
        return
    cached = rt.cluster_metrics_final
    if cached is not None and cached[0] == col.run:
        report["cluster_metrics"] = cached[1]
        return
    ended = col.stopped_wall is not None and col.flushed
    section = query_window(cfg, col.started_wall, col.stopped_wall if col.stopped_wall is not None else time.time())
    if ended:
        rt.cluster_metrics_final = (col.run, section)
    report["cluster_metrics"] = section
