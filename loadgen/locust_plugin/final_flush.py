"""The master's end-of-run flush: every worker of the run is asked for its last delta and waited for (bounded).

Locust's master deletes a worker on its `client_stopped` and adds it back on its `client_ready`, so a worker between
the two when the flush starts is not in `runner.clients`: a worker that drained late (seen in a fresh-clone CI: a
request stuck behind a healed partition), or any worker when the master's stop ends the moment the last user stops
(`locust_fixes.quicken_polls`). The run's workers are therefore known twice over: each worker seen reporting, and each
worker that held users when the stop began (`note_workers_at_stop`: a short run's worker may stop before its first
report). One that never answers is lost (`Collector.lost_workers`).
"""

from __future__ import annotations

import time

import gevent
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, MasterRunner

from loadgen.measure.collector import Collector

__all__ = ["FLUSH_TIMEOUT_S", "flush_workers", "note_workers_at_stop"]

#: How long the master waits for the workers' last deltas.
FLUSH_TIMEOUT_S = 15.0


def note_workers_at_stop(runner: MasterRunner, col: Collector) -> None:
    """At test_stopping: the workers holding users are in the run, reported yet or not."""
    col.seen |= {c.id for c in runner.clients.all if c.state in (STATE_RUNNING, STATE_SPAWNING)}


def flush_workers(runner: MasterRunner, col: Collector, timeout: float = FLUSH_TIMEOUT_S) -> None:
    """Ask every live worker for its last delta and wait (bounded). Live: known to Locust and not missing, or in the
    run (`col.seen`) and briefly unknown to it (between `client_stopped` and `client_ready`)."""
    alive = {c.id for c in runner.clients.all if c.state != STATE_MISSING} | (col.seen - set(runner.clients))
    for wid in sorted(alive):
        runner.send_message("loadgen_flush", {"run": col.run}, client_id=wid)
    deadline = time.monotonic() + timeout
    while not alive <= col.final and time.monotonic() < deadline:
        gevent.sleep(0.05)
    col.seen |= alive
    col.flushed = True
