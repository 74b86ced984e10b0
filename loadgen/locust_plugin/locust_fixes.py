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

`quicken_polls`: two of Locust's waits poll in whole seconds — the headless master's wait for its workers before the
start (`start_automatic_run` in locust/main.py: `time.sleep(1)`) and the master's stop, which waits for the workers'
users (`MasterRunner.stop`: `gevent.sleep(1)` until `user_count` is 0). Each rounds a distributed run up to the next
second, twice: 1-2 s of every run and of every sweep step spent waiting on a condition already met (measured on a
2-core VM: a 2 s run took 9.2 s, 0.9 s of it before the start and 1.1 s between the workers' stop and the report).
The module each loop sleeps through (`time` in locust.main, `gevent` in locust.runners) is replaced, in that Locust
module's namespace only, by a stand-in whose `sleep` polls every 50 ms when called from exactly those two functions and
is the module's own for every other caller (heartbeats, stats, the quit's final-report wait keep their timing). A
Locust whose loops are gone or renamed is left as it is.
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


def _nested_code(code: types.CodeType, name: str) -> types.CodeType | None:
    """The code object of the function ``name`` defined (at any depth) inside ``code``."""
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_name == name:
                return const
            found = _nested_code(const, name)
            if found is not None:
                return found
    return None


def quicken_polls() -> None:
    """Make the two one-second polls of the module docstring poll every `POLL_S` (idempotent)."""
    from locust import main, runners

    stop = getattr(getattr(runners.MasterRunner, "stop", None), "__code__", None)
    if stop is not None and not isinstance(runners.gevent, QuickPolls):
        runners.gevent = cast(Any, QuickPolls(runners.gevent, [stop]))
    start = _nested_code(main.main.__code__, "start_automatic_run")
    if start is not None and not isinstance(main.time, QuickPolls):
        main.time = cast(Any, QuickPolls(main.time, [start]))
