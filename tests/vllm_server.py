"""vLLM's CPU build as a child process, for the vLLM tier (tests/vllm) and the install script's one-token smoke run.

One engine core, pinned to CPU 0 (`VLLM_CPU_OMP_THREADS_BIND=0`): the other core is the load generator's, or its
timestamps would queue behind the engine. `--enforce-eager`: no torch.compile warm-up (34 s to ready instead of
~115-150 s on the 2-core VM; decode ~58 ms per token for SmolLM2-135M in float32 either way is what the tests are
sized for). Loopback only, offline (`HF_HUB_OFFLINE`), no usage statistics sent.

    python -m tests.vllm_server --python VENV/bin/python --model DIR --smoke --log FILE
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from loadgen.locust_plugin.launcher import free_port
from tests.serving import serving_process

__all__ = ["MODEL_NAME", "serving_vllm"]

MODEL_NAME = "smollm2"
# What the tier's server is given beside the model: a batch of 2 so that a handful of users queue (the server
# split, priority), prefix caching and priority scheduling on, and the cached prompt tokens in each usage.
TIER_ARGS = (
    "--max-num-seqs",
    "2",
    "--enable-prefix-caching",
    "--scheduling-policy",
    "priority",
    "--enable-prompt-tokens-details",
)


def _env(cache: Path) -> dict[str, str]:
    return os.environ | {
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB
        "VLLM_CPU_OMP_THREADS_BIND": "0",
        "VLLM_CACHE_ROOT": str(cache),
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }


@contextlib.contextmanager
def serving_vllm(python: Path, model: Path, log_path: Path, extra: tuple[str, ...] = ()) -> Iterator[str]:
    """The OpenAI-compatible server on `model` until the block ends; its base URL. Fails (with the log's tail) when
    it exits or is not healthy within 10 minutes."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    cmd += ["--served-model-name", MODEL_NAME, "--dtype", "float32", "--max-model-len", "2048", "--enforce-eager"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), *extra]

    def healthy() -> bool:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as r:
            return bool(r.status == 200)

    env = _env(model.parent / "cache")
    with serving_process(cmd, log_path, healthy, "vLLM", timeout_s=600, poll_s=1.0, stop_timeout_s=30, env=env):
        yield url


def one_token(url: str) -> str:
    body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 1}
    req = urllib.request.Request(
        f"{url}/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return str(json.loads(r.read())["choices"][0]["message"]["content"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--python", type=Path, required=True)
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--log", type=Path, required=True)
    p.add_argument("--smoke", action="store_true", help="start it, ask for one token, stop it")
    args = p.parse_args()
    try:
        with serving_vllm(args.python, args.model, args.log, TIER_ARGS) as url:
            one_token(url)
    except (AssertionError, OSError) as e:
        print(f"vLLM's CPU build cannot serve on this machine: {e}", file=sys.stderr)
        return 1
    print(f"vLLM served a token on this CPU (log: {args.log})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
