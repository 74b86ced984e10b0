"""Load-generator self-health: event-loop lag, CPU and read delay per worker, and the verdict on whether a run can
be trusted.

A saturated load generator reports its own queueing as the server's latency. Each worker measures how late its
event loop wakes from a short sleep (lag: requests go out late), its process CPU, and how long after the kernel
received a chunk it was read (read delay: chunk times come from the kernel's receive stamps, so a late read only
costs accuracy when a later chunk of the same stream arrived meanwhile and shares the read's one stamp). The master
decides from every worker's lag and CPU; read delay is reported, not judged: a read late by a few ms (the OS ran
another process first) is harmless unless a stream's chunks are closer together than that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loadgen.measure.hist_merge import merge_encoded_into
from loadgen.measure.histogram import LatencyHistogram

__all__ = ["HealthStats", "HealthThresholds", "verdict"]


@dataclass(slots=True)
class HealthThresholds:
    # Loop lag delays every timestamp taken on that loop: above this p99 the latencies include our own queueing.
    loop_lag_p99_ms: float = 20.0
    # A process pinned near one full core cannot read sockets as fast as bytes arrive.
    cpu_percent_p90: float = 95.0
    # Open loop: the dispatcher handed arrivals out this late (its own lateness, not a wait for a free sender):
    # the schedule the target saw was not the one asked for.
    schedule_slip_p99_ms: float = 5.0


@dataclass(slots=True)
class HealthStats:
    # 2 significant digits up to 60 s: 1 % is plenty for lag, and the master keeps one per worker all run.
    loop_lag: LatencyHistogram = field(default_factory=lambda: LatencyHistogram(digits=2, highest_s=60.0))
    cpu_samples: list[float] = field(default_factory=list)
    reads: int = 0
    late_reads: int = 0
    max_read_delay: float = 0.0
    # Reads the C half (protocol/_wire.c) took whole: token chunks no Python touched. A low share at high load means
    # the server's chunks fall off that path (see docs/metrics.md) and the worker spends more CPU per chunk.
    reads_in_c: int = 0
    # Open loop: dispatch time − scheduled time of every arrival (empty in closed loop).
    schedule_slip: LatencyHistogram = field(default_factory=lambda: LatencyHistogram(digits=2, highest_s=60.0))

    def add_slip(self, seconds: float) -> None:
        self.schedule_slip.record(max(seconds, 0.0))

    def add_reads(self, reads: int, late: int, max_delay: float) -> None:
        self.reads += reads
        self.late_reads += late
        self.max_read_delay = max(self.max_read_delay, max_delay)

    def add_lag(self, seconds: float) -> None:
        self.loop_lag.record(max(seconds, 0.0))

    def add_cpu(self, percent: float) -> None:
        self.cpu_samples.append(percent)
        if len(self.cpu_samples) > 4096:  # bounded: keep every other sample
            self.cpu_samples = self.cpu_samples[::2]

    def to_wire(self) -> dict[str, Any]:
        return {
            "loop_lag": self.loop_lag.wire(),
            "cpu": list(self.cpu_samples),
            "reads": [self.reads, self.late_reads, self.max_read_delay],
            "reads_c": self.reads_in_c,
            "slip": self.schedule_slip.wire(),
        }

    def merge_wire(self, w: dict[str, Any]) -> None:
        # The master merges every worker's health every interval (1,000 a 3-s interval at 1,000 workers): what
        # `add_cpu` / `add_reads` / `merge_encoded` do, without a call per sample or an empty histogram's merge.
        lag = self.loop_lag
        blob = w["loop_lag"]
        if blob != lag._lay.empty_wire:
            merge_encoded_into(blob, (lag,))
        cpu = w.get("cpu")
        if cpu:
            samples = self.cpu_samples
            if len(samples) + len(cpu) <= 4096:  # no halving on the way: `add_cpu` per sample would only append
                samples.extend([float(c) for c in cpu])
            else:
                for c in cpu:
                    self.add_cpu(float(c))
        reads, late, worst = w.get("reads", (0, 0, 0.0))
        self.reads += int(reads)
        self.late_reads += int(late)
        worst = float(worst)
        if worst > self.max_read_delay:  # max(kept, worst): the same (max keeps its first unless the second is larger)
            self.max_read_delay = worst
        self.reads_in_c += int(w.get("reads_c", 0))  # absent from a worker without the C half
        if "slip" in w:
            slip = self.schedule_slip
            blob = w["slip"]
            if blob != slip._lay.empty_wire:
                merge_encoded_into(blob, (slip,))

    def summary(self) -> dict[str, Any]:
        cpu = sorted(self.cpu_samples)
        out: dict[str, Any] = {"loop_lag_ms": self.loop_lag.summary_ms()}
        if self.schedule_slip.count:
            out["schedule_slip_ms"] = self.schedule_slip.summary_ms()
        if cpu:
            out["cpu_percent"] = {
                "mean": round(sum(cpu) / len(cpu), 1),
                "p90": round(cpu[min(len(cpu) - 1, int(0.9 * len(cpu)))], 1),
                "max": round(cpu[-1], 1),
            }
        if self.reads:
            out["read_delay"] = {
                "reads": self.reads,
                "late_over_1ms": self.late_reads,
                "late_share": round(self.late_reads / self.reads, 5),
                "max_ms": round(self.max_read_delay * 1e3, 3),
                "in_c": self.reads_in_c,
                "in_c_share": round(min(self.reads_in_c / self.reads, 1.0), 5),
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
                "(the load generator was busy: requests went out late)"
            )
        slip = s.get("schedule_slip_ms", {})
        if slip.get("count") and slip.get("p99", 0.0) > th.schedule_slip_p99_ms:
            reasons.append(
                f"worker {wid}: open-loop schedule slip p99 {slip['p99']:.1f} ms > {th.schedule_slip_p99_ms:g} ms "
                "(the generator could not keep up with the arrival schedule: arrivals went out late)"
            )
        cpu = s.get("cpu_percent")
        if cpu and cpu["p90"] > th.cpu_percent_p90:
            reasons.append(f"worker {wid}: CPU p90 {cpu['p90']:.0f} % > {th.cpu_percent_p90:g} % (saturated)")
    return reasons
