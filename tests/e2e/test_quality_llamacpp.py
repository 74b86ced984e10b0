"""Quality beside speed on a real engine: SmolLM2 at Q4_1 (the baseline) against the same model re-quantised to
Q2_K by llama-quantize, greedy (temperature 0, seed fixed), the variants one after another on the same seeded
prompts. One report gives both the speedup and the agreement with the baseline, counted in the model's own tokens
(the scenario's tokenizer is the GGUF the server runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from loadgen.report.quality import ALL_MIXES
from tests.integration.harness import read_report, run_loadgen

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
FIRST_K = 24


def test_q4_1_against_its_q2_k_requantisation_gives_speedup_and_agreement(
    llama_server: str, llama_requantized: str, tmp_path: Path
) -> None:
    [model] = sorted((ROOT / ".cache" / "llama" / "model").glob("*.gguf"))
    greedy = {"temperature": 0, "seed": 1, "timings_per_token": True}
    variant = {"model": "smollm2", "dialect": "openai-chat", "extra_body": greedy}
    doc = {
        "name": "quality-e2e",
        "seed": 5,
        "tokenizer": str(model),
        "quality": {"first_k": FIRST_K},
        "variants": [
            {"name": "q4_1", "base_url": llama_server, "baseline": True, **variant},
            {"name": "q2_k", "base_url": llama_requantized, **variant},
        ],
        "traffic": {
            "mixes": [{"name": "chat-small", "weight": 1}],
            "custom_mixes": {
                "chat-small": {
                    "buckets": [{"name": "short", "prompt_tokens": [20, 60], "weight": 1}],
                    "output_tokens": [24, 32],
                }
            },
        },
        # One variant at a time (each server alone on its core), a few seconds each.
        "load": {"users": 2, "spawn_rate": 2, "duration": "5s", "warmup": 0, "sequential": True},
        "slos": [],
        "report_dir": str(tmp_path / "report"),
    }
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(doc, sort_keys=False))
    # In-process (no Locust worker): loading the GGUF tokenizer takes seconds on a busy machine, which a worker spends
    # without a heartbeat (the master then drops it).
    proc = run_loadgen(scenario, "--workers", "0", timeout=240)
    assert proc.returncode in (0, 3), proc.stdout[-3000:] + proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    q = report["quality"]
    assert q["method"]["tokens"] == "tokenizer" and q["method"]["first_k"] == FIRST_K
    entry = next(e for e in q["entries"] if e["variant"] == "q2_k" and e["mix"] == ALL_MIXES)
    assert entry["pairs"] >= 5, entry
    a = entry["agreement"]
    assert a["value"] is not None and a["ci_low"] is not None and a["ci_low"] <= a["value"] <= a["ci_high"], a
    # Two quantisations are not the same model: greedy replies part soon (seen: 1-5 % of the first 24 tokens agree
    # on these word-salad prompts, 2x faster), and a reply that parts once disagrees at most positions after.
    assert entry["exact_match"]["value"] < 1.0 and a["value"] < 0.9, entry
    assert entry["speedup_e2e_p50"] is not None and entry["speedup_e2e_p50"] > 0
    assert entry["headline"].startswith("q2_k: ") and "agreement with q4_1" in entry["headline"]
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert entry["headline"] in md
    print(entry["headline"])
