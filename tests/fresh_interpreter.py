"""Run a check in a fresh Python interpreter.

Importing Locust monkey-patches the whole process (sleep, threads, sockets, ssl). Inside the pytest process that
breaks the tests beside it, and once ssl is already imported the patch itself recurses (gevent #1016). Every test
that needs Locust imported runs its check here; the check prints one JSON line as its last output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any


def run_fresh(script: str, timeout: float = 60.0) -> Any:
    """Run `script` in a new interpreter; fail with its stderr unless it exits 0; return its last line as JSON."""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines, f"the check printed nothing; stderr: {proc.stderr[-2000:]}"
    return json.loads(lines[-1])
