"""What a process's `CrashLog` sees (locust_plugin/crashes.py): a greenlet that dies of an exception, and an exception
Locust's event hooks swallow; not a greenlet killed on purpose, nor a task exception Locust handed to the user. It
imports Locust: the check runs in a fresh interpreter."""

from __future__ import annotations

from tests.fresh_interpreter import run_fresh

_CHECK = r"""
import json
import gevent
from locust.event import EventHook
from loadgen.locust_plugin.crashes import CrashLog

log = CrashLog()
log.install()
log.install()  # once per process: a second call wraps nothing twice

def boom():
    raise ValueError("boom")

for _ in range(3):
    gevent.spawn(boom).join()
sleeper = gevent.spawn(gevent.sleep, 10)
gevent.sleep(0)
sleeper.kill()  # GreenletExit: killed on purpose, no crash

hook = EventHook()
def listener(**kw):
    raise KeyError("missing")
hook.add_listener(listener)
hook.fire()
first = log.pop()
print(json.dumps({"first": first, "after_pop": log.entries()}))
"""


def test_the_crash_log_sees_dead_greenlets_and_swallowed_listener_exceptions() -> None:
    out = run_fresh(_CHECK)
    first = out["first"]
    assert len(first) == 2, first
    greenlet, listener = first
    assert greenlet["what"] == "in a greenlet: ValueError: boom" and greenlet["count"] == 3
    assert greenlet["where"].endswith("in boom")
    assert listener["what"] == "in an event listener: KeyError: 'missing'" and listener["count"] == 1
    assert "in listener" in listener["where"]
    # Shipped once: a worker's next report does not repeat it (Locust's process-wide flag is taken as read).
    assert out["after_pop"] == []
