"""The anthropic-messages dialect end to end against the real llama.cpp server's `/v1/messages`.

llama.cpp's Messages stream carries no `timings` (its converter also drops `timings_per_token` and `ignore_eos`), so
the server's own timing of each request is read from its log: `print_timings` writes `eval time = X ms / N tokens`
per finished task. One user sends the requests one after another, so the log's blocks are the records' in order.

Held, as test_llamacpp.py holds the chat dialect:
- token counts: every record's output tokens are the server's (`message_delta`'s output_tokens, the log's N); the
  deltas count them, one fewer (the end-of-sequence token has no delta) or, when a multi-byte character held tokens
  back, the server's total spread over them; the prompt tokens are message_start's input plus its cache reads;
- TPOT vs the log's eval time / (N − 1): median relative difference within 10 %;
- the variant's key goes along in `x-api-key` (llama-server without `--api-key` takes and ignores it), and its
  output length is `max_only`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.integration.harness import quantile, read_records, read_report, run_loadgen

from .conftest import _install, _serving

pytestmark = pytest.mark.e2e

TPOT_REL_TOL = 0.10  # as test_llamacpp.py
_EVAL = re.compile(r"\|\s+eval time =\s+([\d.]+) ms /\s+(\d+) tokens")


@pytest.fixture(scope="module")
def llama_with_log(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    model, server = _install()
    log = tmp_path_factory.mktemp("llama-anthropic") / "server.log"
    with _serving(server, model, log) as url:
        yield url, log


def _scenario(path: Path, url: str) -> Path:
    doc = {
        "name": "anthropic-llamacpp",
        "seed": 11,
        "variants": [
            {
                "name": "messages",
                "base_url": url,
                "model": "smollm2",
                "dialect": "anthropic-messages",
                "api_key_env": "LG_E2E_ANTHROPIC_KEY",
            }
        ],
        "traffic": {
            "mixes": [{"name": "chat-small", "weight": 1}],
            "custom_mixes": {
                "chat-small": {
                    "system_prompt_tokens": 20,
                    "buckets": [{"name": "short", "prompt_tokens": [30, 160], "weight": 1}],
                    "output_tokens": [16, 64],
                }
            },
        },
        "load": {"users": 1, "spawn_rate": 1, "duration": "30s", "warmup": 0},
        "slos": [{"metric": "ttft", "stat": "p99", "max_ms": 60000}],
        "report_dir": str(path.parent / "report"),
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_counts_and_tpot_agree_with_the_server(llama_with_log: tuple[str, Path], tmp_path: Path) -> None:
    url, log = llama_with_log
    start = log.stat().st_size
    env = {**os.environ, "LG_E2E_ANTHROPIC_KEY": "sk-ant-e2e-not-checked-by-llama"}
    proc = run_loadgen(
        _scenario(tmp_path / "s.yaml", url),
        "--workers",
        "0",
        "--raw-records",
        str(tmp_path / "raw"),
        timeout=240,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = sorted(read_records(tmp_path / "raw"), key=lambda r: r["sent"])
    records = [r for r in rows if r["error"] is None and not r["cut_by_stop"]]
    assert len(records) >= 6 and len(records) >= len(rows) - 1  # at most the one cut at the stop (~2.5 s each)
    with log.open("rb") as f:
        f.seek(start)
        evals = [(float(ms), int(n)) for ms, n in _EVAL.findall(f.read().decode(errors="replace"))]
    assert len(evals) >= len(records)
    tpot_rel = []
    for r, (eval_ms, n) in zip(records, evals, strict=False):
        assert r["output_tokens"] == n, r["id"]  # the server's count, from its message_delta
        streamed = sum(r["chunk_tokens"])
        assert n - streamed in ((0, 1, 2, 3) if r["finish_reason"] == "length" else (0, 1)), r["id"]
        # One delta per token, but a multi-byte character (an emoji) waits for its last token: a delta of several,
        # and the server's total then spread over the deltas.
        assert r["finish_reason"] in ("stop", "length") and r["token_source"] in ("one_per_chunk", "usage_spread")
        assert r["prompt_tokens"] and r["prompt_tokens"] > r["prompt_tokens_target"] // 2  # the template adds some
        if n > 2 and r["tpot"]:
            server_tpot_ms = eval_ms / (n - 1)
            tpot_rel.append(abs(r["tpot"] * 1e3 - server_tpot_ms) / server_tpot_ms)
    med, p90 = quantile(tpot_rel, 0.5), quantile(tpot_rel, 0.9)
    spread = sum(r["token_source"] == "usage_spread" for r in records)
    print(f"{len(records)} requests ({spread} spread); TPOT relative diff: median {med:.3f}, p90 {p90:.3f}")
    assert quantile(tpot_rel, 0.5) <= TPOT_REL_TOL
    (variant,) = read_report(tmp_path / "report")["variants"]
    assert variant["output_length"] == "max_only"
