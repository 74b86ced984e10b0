"""The Locust work-arounds: the cached option defaults are Locust's own, computed once, and never shared."""

from __future__ import annotations

from typing import Any

import pytest

# Locust is imported inside the tests, not at collection: importing it monkey-patches the whole test process (sleep,
# threads, sockets), and tests collected beside these rely on the OS's own.


def test_default_args_are_computed_once_and_equal_to_locusts(monkeypatch: pytest.MonkeyPatch) -> None:
    from locust import argument_parser

    from loadgen.locust_plugin import locust_fixes

    calls = []

    def locusts() -> dict[str, Any]:  # Locust's own, uncached, counted
        calls.append(1)
        return {"users": 1, "spawn_rate": 1.0, "host": None}

    monkeypatch.setattr(argument_parser, "default_args_dict", locusts)
    locust_fixes.cache_default_args()
    locust_fixes.cache_default_args()  # idempotent: wraps once
    cached = argument_parser.default_args_dict
    assert cached is not locusts and getattr(cached, "loadgen_cached", False)
    # What a worker's spawn handling does: one call per option of the master's (~60).
    assert all("users" in cached() for _ in range(60))
    assert len(calls) == 1
    assert cached() == locusts()
    mine = cached()
    mine["users"] = -1  # a caller that changes its copy changes nobody else's
    assert cached()["users"] == 1


def test_the_plugin_installs_it() -> None:
    from locust import argument_parser

    from loadgen.locust_plugin.plugin import register

    register()
    assert getattr(argument_parser.default_args_dict, "loadgen_cached", False)
