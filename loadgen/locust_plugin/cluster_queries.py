"""The cluster Prometheus of `metrics.prometheus` on the master: its queries checked before load (a refusal is exit
2 naming the query), and evaluated over the run window into every report the master writes or serves."""

from __future__ import annotations

import sys
import time
from typing import Any

from locust.env import Environment
from locust.runners import WorkerRunner

from loadgen.config.scenario import Scenario
from loadgen.exit_codes import ExitCode
from loadgen.live.cluster_metrics import cluster_config_problems, query_window
from loadgen.locust_plugin.runtime import runtime_of

__all__ = ["attach_cluster_metrics", "check_before_load"]


def check_before_load(environment: Environment, scenario: Scenario, source: str) -> None:
    """On the process that writes reports: every query once against the Prometheus; exit 2 on a problem."""
    if isinstance(environment.runner, WorkerRunner):
        return
    problems = cluster_config_problems(scenario.metrics.prometheus, source)
    if problems:
        sys.stderr.write("".join(f"{p}\n" for p in problems))
        sys.exit(ExitCode.USAGE)


def attach_cluster_metrics(environment: Environment, report: dict[str, Any]) -> None:
    """`cluster_metrics` over the run so far (the whole run once it ended: then read once and kept)."""
    rt = runtime_of(environment)
    cfg = rt.scenario.metrics.prometheus
    col = rt.collector
    if cfg is None or col is None or col.started_wall is None:
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
