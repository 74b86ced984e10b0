"""The peer tools the comparison runs (GuideLLM, inference-perf, NVIDIA AIPerf), each in its own virtualenv.

Each peer is pinned twice: its own version here, and every package of its environment in `requirements/peers/NAME.txt`
(the `pip freeze` of an environment built from the top-level specs below; refresh: delete the file's pins, install
into a fresh venv, `pip freeze > requirements/peers/NAME.txt`). The venvs live under `.cache/peers/` (git-ignored;
`$BENCH_VENVS` moves them) and are rebuilt only when a spec or its requirements file changes (a stamp beside each
venv holds both), so `ensure()` is a no-op when the peer is already there. GuideLLM needs torch: the CPU build
(2.13.0+cpu, ~1.5 GB installed) rather than the CUDA one PyPI resolves to by default (~6 GB).
"""

from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.common import REPO, VENVS

__all__ = ["PEERS", "Peer", "ensure", "version"]

REQUIREMENTS = REPO / "requirements" / "peers"


@dataclass(frozen=True)
class Peer:
    name: str  # the venv's folder and the distribution whose version is reported
    python: str  # the interpreter the venv is built from: "3.11" or "3.12"
    specs: tuple[str, ...]  # what pip installs (pinned); the requirements file pins the rest
    binary: str  # the command in the venv's bin/

    @property
    def venv(self) -> Path:
        return VENVS / self.name

    @property
    def bin(self) -> Path:
        return self.venv / "bin" / self.binary

    @property
    def requirements(self) -> Path:
        return REQUIREMENTS / f"{self.name}.txt"


PEERS: dict[str, Peer] = {
    "guidellm": Peer("guidellm", "3.11", ("torch==2.13.0+cpu", "guidellm==0.8.1"), "guidellm"),
    # inference-perf 0.7 declares Python >= 3.12.
    "inference-perf": Peer("inference-perf", "3.12", ("inference-perf==0.7.0",), "inference-perf"),
    "aiperf": Peer("aiperf", "3.11", ("aiperf==0.13.0",), "aiperf"),
}


def _interpreter(minor: str) -> str:
    """A `pythonX.Y` that runs: on PATH, else pyenv's build of it (its shim refuses a version not selected)."""
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates = [f"python{minor}", *sorted(glob.glob(f"{root}/versions/{minor}*/bin/python{minor}"), reverse=True)]
    for c in candidates:
        exe = shutil.which(c) or (c if Path(c).exists() else None)
        if exe and subprocess.run([exe, "--version"], capture_output=True, check=False).returncode == 0:
            return exe
    raise RuntimeError(f"no working python{minor} (tried {candidates})")


def _stamp(peer: Peer) -> str:
    digest = hashlib.sha256(peer.requirements.read_bytes()).hexdigest()[:12] if peer.requirements.exists() else "-"
    return f"{' '.join(peer.specs)} | {digest}"


def ensure(name: str, log: Path | None = None) -> Path:
    """The peer's command, installing its venv first when it is missing or its pins changed."""
    peer = PEERS[name]
    stamp_file = peer.venv.parent / f"{peer.name}.stamp"
    stamp = _stamp(peer)
    if peer.bin.exists() and stamp_file.exists() and stamp_file.read_text() == stamp:
        return peer.bin
    print(f"# installing {peer.name} ({' '.join(peer.specs)}) into {peer.venv}", file=sys.stderr, flush=True)
    shutil.rmtree(peer.venv, ignore_errors=True)
    stamp_file.unlink(missing_ok=True)
    peer.venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([_interpreter(peer.python), "-m", "venv", str(peer.venv)], check=True)
    pip = [str(peer.venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    if peer.requirements.exists():
        pip += ["-c", str(peer.requirements)]
    out = subprocess.run([*pip, *peer.specs], capture_output=True, text=True, check=False)
    if log is not None:
        log.write_text(out.stdout + out.stderr)
    if out.returncode != 0:
        raise RuntimeError(f"installing {peer.name} failed (exit {out.returncode}): {out.stderr[-2000:]}")
    stamp_file.write_text(stamp)
    return peer.bin


def version(name: str) -> str:
    """The installed version of the peer's distribution, read inside its venv."""
    peer = PEERS[name]
    code = f"import importlib.metadata as m; print(m.version({peer.name!r}))"
    out = subprocess.run([str(peer.venv / "bin" / "python"), "-c", code], capture_output=True, text=True, check=False)
    return out.stdout.strip() or "unknown"
