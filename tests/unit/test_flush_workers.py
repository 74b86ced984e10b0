"""The master's end-of-run flush asks every worker still there, including one Locust has briefly forgotten.

Locust's master deletes a worker on its `client_stopped` and adds it back on its `client_ready`; a worker that drained
late (a request stuck behind a healed partition) is in neither when the master's stop ends. Seen in a fresh-clone CI:
such a worker was never asked for its last delta and was named lost. Runs in a fresh interpreter (Locust patches it).
"""

from __future__ import annotations

from tests.fresh_interpreter import run_fresh

_FLUSH = """
import json
from locust.runners import STATE_MISSING, STATE_RUNNING
from loadgen.locust_plugin import plugin
from loadgen.measure.collector import Collector

class Node:
    def __init__(self, id, state):
        self.id, self.state = id, state

class Clients(dict):
    @property
    def all(self):
        return list(self.values())

col = Collector(1)
col.seen |= {"late", "running", "missing"}  # all three reported during the run
asked = []

class Runner:
    # "late" sent client_stopped and not yet client_ready: Locust holds no node for it.
    clients = Clients(running=Node("running", STATE_RUNNING), missing=Node("missing", STATE_MISSING))

    def send_message(self, kind, data, client_id):
        asked.append(client_id)
        col.final.add(client_id)  # the worker answers at once

plugin._flush_workers(Runner(), col)
print(json.dumps({"asked": sorted(asked), "lost": col.lost_workers({"missing"})}))
"""


def test_a_worker_between_stopped_and_ready_is_asked_and_not_lost() -> None:
    out = run_fresh(_FLUSH)
    assert out["asked"] == ["late", "running"]  # the missing one is not waited for
    assert out["lost"] == ["missing"]
