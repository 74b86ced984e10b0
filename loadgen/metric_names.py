"""The names of what is measured and of its statistics: the one definition the scenario model (SLOs), the
aggregates, the histograms and the reports share."""

from __future__ import annotations

from typing import Literal, get_args

# Only open-loop runs (load.arrival) have a schedule to measure against.
SCHEDULED_METRICS: tuple[str, ...] = ("queue_delay", "ttft_from_schedule", "e2e_from_schedule")

# Measured only from a stream's chunks: a variant with `stream: false` (one whole reply) has none of them.
STREAM_METRICS: tuple[str, ...] = ("ttft", "itl", "icl", "tpot", "ttft_from_schedule")

__all__ = [
    "SCHEDULED_METRICS",
    "STREAM_METRICS",
    "METRICS",
    "PERCENTILES",
    "STATS",
    "MetricName",
    "SLOMetricName",
    "StatName",
]

MetricName = Literal["ttft", "itl", "icl", "tpot", "e2e", "queue_delay", "ttft_from_schedule", "e2e_from_schedule"]
# The SLO that is a share of requests, not a latency; and the one on agent sessions' durations (measure/sessions.py).
SLOMetricName = Literal[MetricName, "success_rate", "session_duration"]
StatName = Literal["p50", "p90", "p95", "p99", "p99.9", "mean", "max"]

METRICS: tuple[str, ...] = get_args(MetricName)
STATS: tuple[str, ...] = get_args(StatName)
# The percentile statistics with their rank in percent ("p99.9" → 99.9).
PERCENTILES: tuple[tuple[str, float], ...] = tuple((s, float(s[1:])) for s in STATS if s.startswith("p"))
