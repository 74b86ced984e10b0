"""Work-arounds for Locust costs that land on the event loop loadgen times its streams on.

`cache_default_args`: a Locust worker handling a spawn message filters the master's options with
`k not in argument_parser.default_args_dict()` inside a comprehension (locust/runners.py), so it builds Locust's
whole argument parser once per option: ~1.8 ms × ~60 options, a 100-250 ms stall of the worker's loop on every
spawn message while users ramp up (measured on a 2-core VM: loop-lag max 241 ms spawning 1,000 users). The
defaults cannot change within a process, so they are computed once and a copy handed out each time.
"""

from __future__ import annotations

from typing import Any

from locust import argument_parser

__all__ = ["cache_default_args"]


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
