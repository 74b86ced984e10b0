"""Whole replies and embeddings against the real llama.cpp server.

- `stream: false` (its OpenAI chat route answers one JSON reply): every request succeeds with exactly max_tokens
  (`ignore_eos`), E2E only, no TTFT, and the report says the variant's replies came whole.
- `dialect: openai-embeddings` (llama-server `--embeddings --pooling mean`), 4 inputs a request, with the model's own
  tokenizer in the scenario: every request's input tokens, as the server counted them in its usage, equal the
  prompt length loadgen built (one-token words cut at spaces stay one token each), and the report's items a second
  are its requests a second times 4.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.harness import read_records, read_report, run_loadgen

pytestmark = pytest.mark.e2e

MODEL = next((Path(__file__).resolve().parents[2] / ".cache" / "llama" / "model").glob("*.gguf"), None)


def _run(tmp_path: Path, variant: dict[str, Any], mix: dict[str, Any], duration: str) -> tuple[dict[str, Any], list]:
    doc = {
        "name": "e2e",
        "seed": 3,
        "tokenizer": str(MODEL),
        "variants": [{"name": "llamacpp", "model": "smollm2", **variant}],
        "traffic": {"mixes": [{"name": "m"}], "custom_mixes": {"m": mix}},
        "load": {"users": 2, "spawn_rate": 10, "duration": duration, "warmup": 0},
        "slos": [{"metric": "success_rate", "min_percent": 100}],
        "report_dir": str(tmp_path / "report"),
    }
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    proc = run_loadgen(tmp_path / "s.yaml", "--workers", "0", "--raw-records", str(tmp_path / "raw"), timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    records = [r for r in read_records(tmp_path / "raw") if not r["cut_by_stop"]]
    return read_report(tmp_path / "report"), records


def test_whole_replies_from_llamacpp_are_exactly_max_tokens_with_no_ttft(llama_server: str, tmp_path: Path) -> None:
    variant = {"base_url": llama_server, "stream": False, "extra_body": {"ignore_eos": True}}
    mix = {"buckets": [{"name": "s", "prompt_tokens": [20, 60]}], "output_tokens": [8, 24]}
    report, records = _run(tmp_path, variant, mix, "5s")
    v = report["variants"][0]
    assert v["streamed"] is False and "ttft" not in v["overall"]["metrics_ms"] and "e2e" in v["overall"]["metrics_ms"]
    assert len(records) >= 3 and v["overall"]["requests"] == len(records)
    for r in records:
        assert r["error"] is None and r["output_tokens"] == r["max_tokens"], r
        assert r["chunk_times"] == [] and r["ttft"] is None and r["e2e"] > 0


def test_llamacpp_embeddings_count_exactly_the_inputs_loadgen_built(llama_embeddings: str, tmp_path: Path) -> None:
    variant = {"base_url": llama_embeddings, "dialect": "openai-embeddings", "items_per_request": 4}
    mix = {"buckets": [{"name": "b", "prompt_tokens": [64, 256]}], "output_tokens": [1, 1]}
    report, records = _run(tmp_path, variant, mix, "6s")
    v = report["variants"][0]
    assert len(records) >= 2 and v["overall"]["ok"] == len(records)  # a few: the check is per request
    for r in records:
        assert r["error"] is None and r["prompt_tokens"] == r["prompt_tokens_target"], r
    print(f"llama.cpp embeddings: {len(records)} requests, {v['pooling']['items_per_s']} items/s")
    assert v["pooling"]["items_per_s"] == pytest.approx(4 * v["overall"]["requests_per_s"], abs=1e-3)
