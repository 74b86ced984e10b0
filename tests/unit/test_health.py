"""Worker self-health: what crosses the wire merges exactly, and the verdict names what went wrong."""

from __future__ import annotations

import random
import re

from loadgen.measure.health import HealthStats, HealthThresholds, verdict
from loadgen.measure.hist_merge import merge_encoded_into


def _worker(lag_s: float, reads: int, late: int, worst_s: float, in_c: int = 0) -> HealthStats:
    h = HealthStats()
    for _ in range(100):
        h.add_lag(lag_s)
    h.add_cpu(50.0)
    h.add_reads(reads, late, worst_s)
    h.reads_in_c += in_c
    return h


def test_interval_reports_merge_into_the_run_totals() -> None:
    run = HealthStats()
    for part in (_worker(0.001, 1000, 3, 0.004, in_c=900), _worker(0.002, 500, 1, 0.009, in_c=300)):
        run.merge_wire(part.to_wire())
    s = run.summary()
    assert s["read_delay"] == {
        "reads": 1500,
        "late_over_1ms": 4,
        "late_share": round(4 / 1500, 5),
        "max_ms": 9.0,
        "in_c": 1200,
        "in_c_share": 0.8,
    }
    assert s["loop_lag_ms"]["count"] == 200
    assert s["cpu_percent"]["mean"] == 50.0


def test_merge_wire_equals_adding_each_sample() -> None:
    """The master's merge (CPU samples appended in one go while no halving is due) keeps what `add_cpu` /
    `add_reads` per sample keep: across the 4,096-sample bound, and the largest read delay whichever comes first."""
    rng = random.Random(3)
    run, each = HealthStats(), HealthStats()
    for n in (3, 4000, 90, 3, 5000, 1, 0):
        part = HealthStats()
        for _ in range(n):
            part.add_cpu(rng.uniform(0, 100))
        part.add_reads(rng.randint(0, 50), rng.randint(0, 5), rng.choice([0.0, 0.002, rng.uniform(0, 0.01)]))
        part.add_lag(rng.expovariate(1000))
        wire = part.to_wire()
        run.merge_wire(wire)
        merge_encoded_into(wire["loop_lag"], (each.loop_lag,))
        for c in wire["cpu"]:
            each.add_cpu(float(c))
        each.add_reads(*wire["reads"])
        assert run.cpu_samples == each.cpu_samples
        assert (run.reads, run.late_reads, run.max_read_delay) == (each.reads, each.late_reads, each.max_read_delay)
    assert len(run.cpu_samples) <= 4096
    assert run.summary() == each.summary()


def test_a_report_without_read_counts_still_merges() -> None:
    run = HealthStats()
    wire = _worker(0.001, 0, 0, 0.0).to_wire()
    del wire["reads"]  # a worker that read nothing over TCP (TLS only), or an older one
    del wire["reads_c"]  # and one without the C half
    run.merge_wire(wire)
    assert "read_delay" not in run.summary()


def test_verdict_names_loop_lag_and_cpu_not_late_reads() -> None:
    th = HealthThresholds()
    late_reads = _worker(0.001, 10_000, 300, 0.040)
    laggy = _worker(0.050, 10_000, 0, 0.0)
    busy = _worker(0.001, 10_000, 0, 0.0)
    for _ in range(20):
        busy.add_cpu(99.0)
    assert verdict({"w0": late_reads.summary()}, th) == []
    (reason,) = verdict({"w1": laggy.summary()}, th)
    assert "w1" in reason and "event-loop lag" in reason
    (reason,) = verdict({"w2": busy.summary()}, th)
    assert "w2" in reason and "CPU" in reason


def test_schedule_slip_merges_and_a_late_dispatcher_is_named() -> None:
    th = HealthThresholds()
    on_time, late = _worker(0.001, 0, 0, 0.0), _worker(0.001, 0, 0, 0.0)
    for _ in range(100):
        on_time.add_slip(0.0002)
        late.add_slip(0.030)
    run = HealthStats()
    for part in (on_time, late):
        run.merge_wire(part.to_wire())
    assert run.summary()["schedule_slip_ms"]["count"] == 200
    assert verdict({"w0": on_time.summary()}, th) == []
    (reason,) = verdict({"w1": late.summary()}, th)
    assert "w1" in reason and re.search(r"schedule slip p99 30\.\d ms > 5 ms", reason)  # 2-digit histogram
    # Closed loop has no slip: nothing in the summary, nothing judged.
    assert "schedule_slip_ms" not in _worker(0.001, 0, 0, 0.0).summary()
