"""Work-arounds for Locust costs that land on the event loop loadgen times its streams on.

`cache_default_args`: a Locust worker handling a spawn message filters the master's options with
`k not in argument_parser.default_args_dict()` inside a comprehension (locust/runners.py), so it builds Locust's
whole argument parser once per option: ~1.8 ms × ~60 options, a 100-250 ms stall of the worker's loop on every
spawn message while users ramp up (measured on a 2-core VM: loop-lag max 241 ms spawning 1,000 users). The
defaults cannot change within a process, so they are computed once and a copy handed out each time.

`warm_stop_caller_lookup`: `Runner.stop()` (locust/runners.py) first logs its caller at debug level, found with
`inspect.stack()`, which reads every frame's source and, on its first call in a process, maps the file of every loaded
module (~1,000 here): 100 ms on the loop at the very moment the drain's requests are still streaming (measured on a
2-core VM). Their chunks wait in the socket and come in one read with the last one's kernel stamp, so the stop itself
put a 100 ms gap into the drained requests' ITL and TTFT. Paid once at start-up instead, the lookup at the stop finds
everything cached (0.2 ms).

`quicken_polls`: the master's stop waits for the workers' users in whole seconds (`MasterRunner.stop`:
`gevent.sleep(1)` until `user_count` is 0), rounding every distributed run and sweep step up to the next second
(measured on a 2-core VM: workers stopped -> report 1.08 s, 0.13 s polled every 50 ms). `gevent` is replaced, in
locust.runners' namespace only, by a stand-in whose `sleep` polls every 50 ms when called from exactly that function
and is gevent's own for every other caller (heartbeats, stats, the quit's final-report wait keep their timing). The
master's one-second wait for its workers before the start (locust/main.py) is left as it is: on Locust 2.35 a worker
says it is ready before its init has run, and that second is what lets the init finish before the first spawn.
"""

from __future__ import annotations

import inspect
import sys
import types
from collections.abc import Iterable
from typing import Any, cast

from locust import argument_parser

__all__ = ["POLL_S", "QuickPolls", "cache_default_args", "install", "quicken_polls", "warm_stop_caller_lookup"]

#: How often the quickened loops look again, in seconds.
POLL_S = 0.05


def install() -> None:
    """Every work-around that is applied when the plugin is registered (idempotent)."""
    cache_default_args()
    quicken_polls()


def cache_default_args() -> None:
    """Make `locust.argument_parser.default_args_dict` compute its result once per process. Idempotent."""
    current = argument_parser.default_args_dict
    if getattr(current, "loadgen_cached", False):
        return
    defaults: dict[str, Any] = current()

    def default_args_dict() -> dict[str, Any]:
        return dict(defaults)

    default_args_dict.loadgen_cached = True  # type: ignore[attr-defined]
    argument_parser.default_args_dict = default_args_dict


def warm_stop_caller_lookup() -> None:
    """Fill `inspect`'s module-file map and the source-line cache now, before any load (see the module docstring)."""
    inspect.stack()


class QuickPolls:
    """Stands in for ``module`` in one Locust module's namespace: ``sleep`` called from one of ``callers`` (code
    objects) waits at most `POLL_S`; any other caller, and any other attribute, is the module's own."""

    def __init__(self, module: Any, callers: Iterable[types.CodeType]) -> None:
        self.module = module
        self.callers = frozenset(callers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)

    def sleep(self, seconds: float = 0, *args: Any, **kwargs: Any) -> Any:
        if seconds > POLL_S and sys._getframe(1).f_code in self.callers:
            seconds = POLL_S
        return self.module.sleep(seconds, *args, **kwargs)


def quicken_polls() -> None:
    """Make the stop's one-second poll of the module docstring poll every `POLL_S` (idempotent)."""
    from locust import runners

    stop = getattr(getattr(runners.MasterRunner, "stop", None), "__code__", None)
    if stop is not None and not isinstance(runners.gevent, QuickPolls):
        runners.gevent = cast(Any, QuickPolls(runners.gevent, [stop]))
