"""Load-generator self-health: event-loop lag and CPU per worker, and the verdict on whether a run can be trusted.

A saturated load generator reports its own queueing as the server's latency. Each worker measures how late its
event loop wakes from a short sleep (lag) and its process CPU; the master decides from every worker's numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .histogram import LatencyHistogram

__all__ = ["HealthStats", "HealthThresholds", "verdict"]


@dataclass(slots=True)
class HealthThresholds:
    # Loop lag delays every timestamp taken on that loop: above this p99 the latencies include our own queueing.
    loop_lag_p99_ms: float = 20.0
    # A process pinned near one full core cannot read sockets as fast as bytes arrive.
    cpu_percent_p90: float = 95.0


@dataclass(slots=True)
class HealthStats:
    loop_lag: LatencyHistogram = field(default_factory=LatencyHistogram)
    cpu_samples: list[float] = field(default_factory=list)

    def add_lag(self, seconds: float) -> None:
        self.loop_lag.record(max(seconds, 0.0))

    def add_cpu(self, percent: float) -> None:
        self.cpu_samples.append(percent)
        if len(self.cpu_samples) > 4096:  # bounded: keep every other sample
            self.cpu_samples = self.cpu_samples[::2]

    def to_wire(self) -> dict[str, Any]:
        return {"loop_lag": self.loop_lag.encode(), "cpu": list(self.cpu_samples)}

    def merge_wire(self, w: dict[str, Any]) -> None:
        self.loop_lag.merge_encoded(w["loop_lag"])
        for c in w.get("cpu", []):
            self.add_cpu(float(c))

    def summary(self) -> dict[str, Any]:
        cpu = sorted(self.cpu_samples)
        out: dict[str, Any] = {"loop_lag_ms": self.loop_lag.summary_ms()}
        if cpu:
            out["cpu_percent"] = {
                "mean": round(sum(cpu) / len(cpu), 1),
                "p90": round(cpu[min(len(cpu) - 1, int(0.9 * len(cpu)))], 1),
                "max": round(cpu[-1], 1),
            }
        return out


def verdict(workers: dict[str, dict[str, Any]], th: HealthThresholds) -> list[str]:
    """Reasons the run is not trustworthy (empty list: trustworthy). `workers` maps id → `HealthStats.summary()`."""
    reasons = []
    for wid, s in sorted(workers.items()):
        lag = s.get("loop_lag_ms", {})
        if lag.get("count") and lag.get("p99", 0.0) > th.loop_lag_p99_ms:
            reasons.append(
                f"worker {wid}: event-loop lag p99 {lag['p99']:.1f} ms > {th.loop_lag_p99_ms:g} ms "
                "(the load generator delayed its own timestamps)"
            )
        cpu = s.get("cpu_percent")
        if cpu and cpu["p90"] > th.cpu_percent_p90:
            reasons.append(f"worker {wid}: CPU p90 {cpu['p90']:.0f} % > {th.cpu_percent_p90:g} % (saturated)")
    return reasons
