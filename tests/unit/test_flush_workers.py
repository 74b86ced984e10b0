"""The master's end-of-run flush asks every worker of the run, including one Locust has briefly forgotten.

Locust's master deletes a worker on its `client_stopped` and adds it back on its `client_ready`; a worker that drained
late (a request stuck behind a healed partition) is in neither when the master's stop ends. Seen in a fresh-clone CI:
such a worker was never asked for its last delta and was named lost. A worker that held users at the stop but had not
reported yet (a short run) must be asked too. Runs in a fresh interpreter (Locust patches it).
"""

from __future__ import annotations

from tests.fresh_interpreter import run_fresh

# A fake master's clients and a collector: what both checks start from (each in a fresh interpreter).
_FAKE_MASTER = """
import json
from locust.runners import STATE_MISSING, STATE_RUNNING, STATE_SPAWNING
from loadgen.locust_plugin import final_flush
from loadgen.measure.collector import Collector

class Node:
    def __init__(self, id, state):
        self.id, self.state = id, state

class Clients(dict):
    @property
    def all(self):
        return list(self.values())

col = Collector(1)
"""

_FLUSH = (
    _FAKE_MASTER
    + """
col.seen |= {"late", "running", "missing"}  # all three reported during the run
asked = []

class Runner:
    # "late" sent client_stopped and not yet client_ready: Locust holds no node for it.
    clients = Clients(running=Node("running", STATE_RUNNING), missing=Node("missing", STATE_MISSING))

    def send_message(self, kind, data, client_id):
        asked.append(client_id)
        col.final.add(client_id)  # the worker answers at once

final_flush.flush_workers(Runner(), col)
print(json.dumps({"asked": sorted(asked), "lost": col.lost_workers({"missing"})}))
"""
)


def test_a_worker_between_stopped_and_ready_is_asked_and_not_lost() -> None:
    out = run_fresh(_FLUSH)
    assert out["asked"] == ["late", "running"]  # the missing one is not waited for
    assert out["lost"] == ["missing"]


_UNREPORTED = (
    _FAKE_MASTER
    + """
asked = []

class Runner:
    clients = Clients(
        quick=Node("quick", STATE_RUNNING), ramping=Node("ramping", STATE_SPAWNING), gone=Node("gone", STATE_MISSING)
    )

    def send_message(self, kind, data, client_id):
        asked.append(client_id)
        if client_id != "ramping":
            col.final.add(client_id)  # "ramping" never answers

runner = Runner()
final_flush.note_workers_at_stop(runner, col)  # test_stopping: none of them has reported yet
# The stop: "quick" and "ramping" sent client_stopped and not yet client_ready; Locust holds only the missing one.
del runner.clients["quick"], runner.clients["ramping"]
final_flush.flush_workers(runner, col, timeout=0.3)
print(json.dumps({"asked": sorted(asked), "lost": col.lost_workers({"gone"})}))
"""
)


def test_workers_with_users_at_the_stop_are_asked_even_before_their_first_report() -> None:
    out = run_fresh(_UNREPORTED)
    assert out["asked"] == ["quick", "ramping"]
    # The one that held users and never answered is lost; the missing one never took part (no users, no reports).
    assert out["lost"] == ["ramping"]
