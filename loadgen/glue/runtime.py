"""Per-process loadgen state for a Locust run, carried on the Environment (no module globals).

Workers (and a single local process) record requests into an `Aggregate`; a master (or local process) owns a
`Collector` that merges what workers report and turns it into the report at the end.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path
from typing import Any

import gevent
import orjson
import psutil
from locust.env import Environment

from ..aggregate import Aggregate
from ..config import Scenario
from ..health import HealthStats
from ..records import RequestRecord
from .lanes import LaneAssigner

__all__ = ["Collector", "Runtime", "runtime_of"]

_LAG_PERIOD = 0.05
_CPU_PERIOD = 1.0


class RawRecordWriter:
    """Opt-in JSONL shard of every raw record, flushed often so a dead process loses little."""

    def __init__(self, directory: Path, tag: str) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"records-{tag}.jsonl"
        self._fh = open(self.path, "ab")  # noqa: SIM115 - lives as long as the run
        self._pending: list[bytes] = []

    def write(self, rec: RequestRecord) -> None:
        self._pending.append(orjson.dumps(rec.to_json(), option=orjson.OPT_APPEND_NEWLINE))
        if len(self._pending) >= 256:
            self.flush()

    def flush(self) -> None:
        if self._pending:
            self._fh.write(b"".join(self._pending))
            self._fh.flush()
            self._pending.clear()

    def close(self) -> None:
        self.flush()
        self._fh.close()


class Runtime:
    def __init__(self, environment: Environment, scenario: Scenario, raw_dir: str | None) -> None:
        self.env = environment
        self.scenario = scenario
        self.aggregate = Aggregate()
        self.health = HealthStats()
        self.warmup_end = math.inf
        self.assigner: LaneAssigner | None = None
        self.raw_dir = Path(raw_dir) if raw_dir else None
        self.raw: RawRecordWriter | None = None
        self.worker_tag = f"w{os.getpid()}"
        self._monitors: list[gevent.Greenlet] = []
        self.collector: Collector | None = None

    def worker_index(self) -> int:
        return max(int(getattr(self.env.runner, "worker_index", 0)), 0)

    def on_test_start(self) -> None:
        now = time.monotonic()
        self.warmup_end = now + self.scenario.load.warmup
        self.assigner = LaneAssigner(list(self.scenario.variants), self.worker_index())
        self.worker_tag = f"w{self.worker_index()}-{os.getpid()}"
        if self.raw_dir is not None and self.raw is None:
            self.raw = RawRecordWriter(self.raw_dir, self.worker_tag)
        if not self._monitors:
            self._monitors = [gevent.spawn(self._watch_loop_lag), gevent.spawn(self._watch_cpu)]

    def on_test_stop(self) -> None:
        for g in self._monitors:
            g.kill(block=False)
        self._monitors = []
        if self.raw is not None:
            self.raw.flush()

    def record(self, rec: RequestRecord) -> None:
        self.aggregate.add(rec, time.time())
        if self.raw is not None:
            self.raw.write(rec)

    def take_report(self) -> dict[str, Any]:
        """What a worker ships to the master: the delta since its last report."""
        health, self.health = self.health, HealthStats()
        if self.raw is not None:
            self.raw.flush()
        return {"agg": self.aggregate.take_delta(), "health": health.to_wire()}

    def _watch_loop_lag(self) -> None:
        # How late the loop wakes from a short sleep = how late every timestamp taken on this loop can be.
        while True:
            t = time.monotonic()
            gevent.sleep(_LAG_PERIOD)
            self.health.add_lag(time.monotonic() - t - _LAG_PERIOD)

    def _watch_cpu(self) -> None:
        proc = psutil.Process()
        proc.cpu_percent(None)
        while True:
            gevent.sleep(_CPU_PERIOD)
            self.health.add_cpu(proc.cpu_percent(None))


class Collector:
    """On the master (or a local process): merged results, per-worker health, and who reported last."""

    def __init__(self) -> None:
        self.aggregate = Aggregate()
        self.health: dict[str, HealthStats] = {}
        self.seen: set[str] = set()
        self.final: set[str] = set()
        self.started_wall: float | None = None
        self.stopped_wall: float | None = None
        self.reported = False

    def merge_report(self, worker_id: str, data: dict[str, Any], final: bool = False) -> None:
        self.seen.add(worker_id)
        self.aggregate.merge_wire(data["agg"])
        self.health.setdefault(worker_id, HealthStats()).merge_wire(data["health"])
        if final:
            self.final.add(worker_id)

    def lost_workers(self) -> list[str]:
        return sorted(self.seen - self.final)


def runtime_of(environment: Environment) -> Runtime:
    rt = getattr(environment, "loadgen", None)
    if rt is None:
        raise RuntimeError("loadgen is not initialised: run the locustfile with --scenario FILE")
    assert isinstance(rt, Runtime)
    return rt
