"""register() attaches loadgen's listeners to Locust's hooks once however often it is called, and marks nothing on
Locust's modules. In a fresh interpreter: importing locust monkey-patches the process."""

from __future__ import annotations

import subprocess
import sys

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
print("ok")
"""


def test_register_is_idempotent_and_leaves_locusts_modules_alone() -> None:
    out = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-2000:]
