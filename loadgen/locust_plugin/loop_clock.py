"""Locust's `-t` ends a run on time although the event loop's clock is cached.

libev (gevent's loop) arms a timer against the time it read at the start of its current iteration, not the time
now. `gevent.sleep` brings that clock to now first; a bare timer (`gevent.spawn_later`, which Locust's `-t` uses)
does not, so the start-up that ran before the loop first turned (imports, the scenario, the preflight: ~1 s on a
busy 2-core VM) came off the run: `-t 4s` ended a fresh-clone CI's run 3.16 s after it was armed, and loadgen rightly
reported it stopped before its end (measured: a 1 s `spawn_later` armed after 1 s of blocking fires at once).
`refresh_loop_clock`, the last `init` listener, brings the loop's clock to now just before Locust arms the timer.
"""

from __future__ import annotations

import contextlib
from typing import Any

import gevent
from locust import events

__all__ = ["refresh_loop_clock", "register"]


def refresh_loop_clock(**_: Any) -> None:
    gevent.get_hub().loop.update_now()


def register() -> None:
    """Make `refresh_loop_clock` the last `init` listener (again, when called again)."""
    with contextlib.suppress(ValueError):  # not attached yet
        events.init.remove_listener(refresh_loop_clock)
    events.init.add_listener(refresh_loop_clock)
