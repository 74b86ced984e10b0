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
"""

from __future__ import annotations

import inspect
from typing import Any

from locust import argument_parser

__all__ = ["cache_default_args", "warm_stop_caller_lookup"]


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
