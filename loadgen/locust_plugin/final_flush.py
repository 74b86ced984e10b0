"""The master's end-of-run flush: every worker of the run is asked for its last delta and waited for (bounded).

Locust's master deletes a worker on its `client_stopped` and adds it back on its `client_ready`, so a worker between
the two when the flush starts is not in `runner.clients`: a worker that drained late (seen in a fresh-clone CI: a
request stuck behind a healed partition), or any worker when the master's stop ends the moment the last user stops
(`locust_fixes.quicken_polls`). The run's workers are therefore known twice over: each worker seen reporting, and each
worker that held users when the stop began (`note_workers_at_stop`: a short run's worker may stop before its first
report). One that never answers is lost (`Collector.lost_workers`).

The worker's side: it answers with its final delta (`send_final`), once per run — on the master's request, or first
thing when it quits on its own mid-run (`hand_over_on_quit`: SIGTERM to an evicted or scaled-down pod, a Ctrl-C at its
own terminal). Then what it measured reaches the master whole, without a raw shard the master may not be able to read
(a pod's own disk), and the master's flush does not wait for a worker that has gone.
"""

from __future__ import annotations

import time

import gevent
from locust.env import Environment
from locust.runners import STATE_INIT, STATE_MISSING, STATE_RUNNING, STATE_SPAWNING, STATE_STOPPED, MasterRunner

from loadgen.locust_plugin.runtime import Runtime
from loadgen.measure.collector import FLUSH_TIMEOUT_S, Collector

__all__ = ["FLUSH_TIMEOUT_S", "flush_workers", "hand_over_on_quit", "note_workers_at_stop", "send_final"]


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


def send_final(environment: Environment, rt: Runtime) -> None:
    """A worker: stop the users if they still run (Locust's `-t` makes the master quit without stopping its workers
    first; a worker quitting on its own), so that the in-flight requests are drained or cut and the delta is
    complete, then ship the final delta (marked with this worker's run: the master drops one for another run)."""
    runner = environment.runner
    assert runner is not None
    if runner.state not in (STATE_STOPPED, STATE_INIT):
        runner.stop()
    rt.on_test_stop()
    rt.final_run = rt.run
    runner.send_message("loadgen_final", rt.report_since_last(final=True))


def hand_over_on_quit(environment: Environment, **_: object) -> None:
    """A worker's quitting listener, added after its runner's (Locust fires them in reverse, so this runs before the
    runner tells the master it quit): a run under way whose final delta has not gone is handed over now."""
    rt = getattr(environment, "loadgen", None)
    if isinstance(rt, Runtime) and rt.started and rt.final_run != rt.run:
        send_final(environment, rt)
