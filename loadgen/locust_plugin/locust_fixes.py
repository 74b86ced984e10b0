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

`quicken_polls`: three of Locust's waits go in whole or half seconds for a condition usually met long before: the
headless master's wait for its workers before the start (`start_automatic_run` in locust/main.py: `time.sleep(1)`), the
master's stop, which waits for the workers' users (`MasterRunner.stop`: `gevent.sleep(1)` until `user_count` is 0), and
the master's quit, which sleeps 0.5 s for the workers' last reports (`MasterRunner.quit`), a second time when Locust
shuts down. Together about 3 s of every distributed run and sweep step (measured on a 2-core AMD EPYC VM: a 2 s run took
8.2 s; ready -> start 0.9 s, workers stopped -> report 1.08 s, report -> exit 1.0 s). The module each wait sleeps
through (`time` in locust.main, `gevent` in locust.runners) is replaced, in that Locust module's namespace only, by a
stand-in whose `sleep` polls every 50 ms when called from exactly those functions and is the module's own for every
other caller (heartbeats, stats, reconnects keep their timing). The start and the stop look again in loops of their own.
The quit's sleep ends early only once the run's report is written (the caller says how to tell) and no live worker is
left (each worker's quit reply follows its last report on the same socket); a quit before the report — a SIGTERM's,
whose quitting listeners write the report after it — keeps its 0.5 s, which is what lets them finish before the master's
main greenlet, woken by the quit's end, exits. A Locust whose waits are gone or renamed is left as it is.

`hold_messages_until_init`: a Locust worker tells its master it is ready when its runner is built, before the `init`
event that loadgen's set-up runs in (locust/main.py), so the master's spawn — and loadgen's own messages before it —
can reach a worker whose init has not run: it has no variant classes and no runtime, and sends nothing (seen on
Locust 2.35 with a quick start; possible at any speed, since the master starts at its first poll after the last
worker is ready). The worker's message loop is held, every message but the connection's `ack`, until
`initialised()` is called at the end of loadgen's init; nothing is dropped or reordered.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
import time
import types
from collections.abc import Callable, Mapping
from typing import Any, cast

from gevent.event import Event
from locust import argument_parser

__all__ = [
    "HOLD_LIMIT_S",
    "POLL_S",
    "HeldRpc",
    "QuickPolls",
    "cache_default_args",
    "hold_messages_until_init",
    "initialised",
    "install",
    "quicken_polls",
    "warm_stop_caller_lookup",
]

#: How often the quickened loops look again, in seconds.
POLL_S = 0.05
#: The longest a worker holds its master's messages for an init that has not finished (then they go through, and the
#: run reports the worker uninitialised): far above any init measured (a .gguf tokenizer uncached: 4 s).
HOLD_LIMIT_S = 300.0

#: A caller's condition for ending its wait early, given the caller's frame.
Done = Callable[[types.FrameType], bool]

_initialised = Event()


def install(reported: Callable[[Any], bool]) -> None:
    """Every work-around that is applied when the plugin is registered (idempotent). ``reported(environment)``: the
    run's report is written (see `quicken_polls`)."""
    cache_default_args()
    quicken_polls(reported)
    hold_messages_until_init()


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
    objects) waits in `POLL_S` steps — one step when the caller's condition is None (its own loop looks again), else
    until the condition holds for the caller's frame or the time asked for has passed. Any other caller, and any other
    attribute, is the module's own."""

    def __init__(self, module: Any, callers: Mapping[types.CodeType, Done | None]) -> None:
        self.module = module
        self.callers = dict(callers)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)

    def sleep(self, seconds: float = 0, *args: Any, **kwargs: Any) -> Any:
        frame = sys._getframe(1)
        if seconds <= POLL_S or frame.f_code not in self.callers:
            return self.module.sleep(seconds, *args, **kwargs)
        done = self.callers[frame.f_code]
        if done is None:
            return self.module.sleep(POLL_S, *args, **kwargs)
        end = time.monotonic() + seconds
        while not done(frame) and (left := end - time.monotonic()) > 0:
            self.module.sleep(min(POLL_S, left))
        return None


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


def _quit_may_end(reported: Callable[[Any], bool], frame: types.FrameType) -> bool:
    """For `MasterRunner.quit`: the report is written and every worker still listed is missing (the live ones have
    answered the quit)."""
    from locust.runners import STATE_MISSING

    master = frame.f_locals["self"]
    return reported(master.environment) and all(c.state == STATE_MISSING for c in master.clients.all)


def quicken_polls(reported: Callable[[Any], bool]) -> None:
    """Make the waits of the module docstring look every `POLL_S` (idempotent)."""
    from locust import main, runners

    waits: dict[types.CodeType, Done | None] = {}
    stop = getattr(getattr(runners.MasterRunner, "stop", None), "__code__", None)
    if stop is not None:
        waits[stop] = None
    quit_ = getattr(getattr(runners.MasterRunner, "quit", None), "__code__", None)
    if quit_ is not None:
        waits[quit_] = functools.partial(_quit_may_end, reported)
    if isinstance(runners.gevent, QuickPolls):
        runners.gevent.callers.update(waits)
    elif waits:
        runners.gevent = cast(Any, QuickPolls(runners.gevent, waits))
    start = _nested_code(main.main.__code__, "start_automatic_run")
    if start is not None and not isinstance(main.time, QuickPolls):
        main.time = cast(Any, QuickPolls(main.time, {start: None}))


class HeldRpc:
    """Stands in for Locust's rpc module in locust.runners' namespace: a worker's `Client` returns each message from
    the master but the connection's ``ack`` only once `initialised()` has been called in this process."""

    def __init__(self, module: Any) -> None:
        self.module = module

        class Client(module.Client):
            def recv(self) -> Any:
                msg = super().recv()
                if msg.type != "ack" and not _initialised.is_set() and not _initialised.wait(HOLD_LIMIT_S):
                    logging.getLogger("loadgen").error(
                        "loadgen's init has not finished after %.0f s: the master's messages go through", HOLD_LIMIT_S
                    )
                    _initialised.set()
                return msg

        self.Client = Client

    def __getattr__(self, name: str) -> Any:
        return getattr(self.module, name)


def hold_messages_until_init() -> None:
    """Put `HeldRpc` in locust.runners' namespace (idempotent)."""
    from locust import runners

    if not isinstance(runners.rpc, HeldRpc):
        runners.rpc = cast(Any, HeldRpc(runners.rpc))


def initialised() -> None:
    """loadgen's init has run in this process: a worker's held messages go through (at the loop's next turn)."""
    _initialised.set()
