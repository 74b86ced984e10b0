"""register() attaches loadgen's listeners to Locust's hooks once however often it is called, and marks nothing on
Locust's modules. In a fresh interpreter: importing locust monkey-patches the process."""

from __future__ import annotations

from tests.fresh_interpreter import run_fresh

_CHECK = """
from locust import events
from loadgen.locust_plugin import plugin
before = set(vars(events))
plugin.register()
plugin.register()
for hook, listener in [(events.init, plugin._on_init), (events.test_stop, plugin._on_test_stop),
                       (events.init_command_line_parser, plugin._add_arguments)]:
    n = hook._handlers.count(listener)
    assert n == 1, (listener.__name__, n)
assert set(vars(events)) == before, set(vars(events)) - before
print('"ok"')
"""


def test_register_is_idempotent_and_leaves_locusts_modules_alone() -> None:
    assert run_fresh(_CHECK) == "ok"
