"""A worker that left before the stop (stopped mid-run, it handed its figures over first) is named with when it left;
one that answered the final flush after the stop is not, and neither is lost."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.measure import collector as collector_module
from loadgen.measure.collector import Collector
from loadgen.measure.health import HealthStats
from loadgen.report.lost_workers import worker_notes


def _final(col: Collector, worker: str) -> None:
    assert col.merge_report(worker, {"run": col.run, "health": HealthStats().to_wire()}, final=True)


def test_a_final_report_before_the_stop_is_a_worker_that_left(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(collector_module.time, "time", lambda: now[0])
    col = Collector(1)
    col.started_wall = 1000.0
    col.seen |= {"a", "b"}
    now[0] = 1003.27
    _final(col, "a")  # stopped mid-run: its hand-over
    now[0] = 1010.0
    col.stopped_wall = now[0]
    now[0] = 1010.4
    _final(col, "b")  # the final flush's answer
    _final(col, "a")  # a repeat changes nothing
    col.flushed = True
    label = {"a": "worker-0", "b": "worker-1"}
    assert col.workers_left(label) == {"worker-0": 3.3}
    assert col.lost_workers() == []
    run: dict[str, Any] = {"lost_workers": [], "workers_left": col.workers_left(label)}
    assert worker_notes(run) == [
        "worker-0 left the run 3.3 s in (stopped before the end): its figures up to then are in, and its users ran "
        "on the remaining workers from then on"
    ]


def test_lost_workers_come_first_and_a_run_without_either_says_nothing() -> None:
    assert worker_notes({"lost_workers": [], "lost_in_flight": {}}) == []
    notes = worker_notes(
        {"lost_workers": ["worker-2"], "lost_in_flight": {"worker-2": 3}, "workers_left": {"worker-0": 1.5}}
    )
    assert notes[0].startswith("lost worker worker-2: its in-flight requests (3 at its last report)")
    assert notes[1].startswith("worker-0 left the run 1.5 s in")
