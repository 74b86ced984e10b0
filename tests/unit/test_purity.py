"""The core must not import locust or gevent: importing locust monkey-patches the whole process."""

from __future__ import annotations

import subprocess
import sys

CORE = [
    "loadgen",
    "loadgen.config",
    "loadgen.prompts",
    "loadgen.sse",
    "loadgen.stream",
    "loadgen.dialects",
    "loadgen.aggregate",
    "loadgen.report",
    "loadgen.health",
    "loadgen.sim",
    "loadgen.cli",
    "loadgen.runner",
]


def test_core_modules_import_neither_locust_nor_gevent() -> None:
    code = (
        "import importlib, sys\n"
        f"for m in {CORE!r}: importlib.import_module(m)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('locust', 'gevent', 'geventhttpclient'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""
