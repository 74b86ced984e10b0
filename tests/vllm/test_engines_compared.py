"""Another engine as a deployment variant, on real engines: vLLM (SmolLM2-135M in float32, dequantised from the Q4_1
GGUF) against llama.cpp serving that same GGUF, one after another on the same seeded prompts, greedy. One report
gives what the seeds' "another engine" strategy asks: the speedup with its interval, the agreement of the greedy
replies (counted in the model's own tokens: the scenario's tokenizer is the GGUF both serve), and $ / 1M tokens
from each variant's price.

Held: both engines answered every request; the paired speedups exist with intervals around them; agreement has an
interval around it; the same weights give the same reply most of the time, over the first 16 tokens (llama.cpp
computes with the quantised blocks and 8-bit activations, vLLM in float32: greedy replies part where two tokens are
near-tied — agreement at least 0.5 is held; measured 0.669, interval 0.47–0.85 over 17 pairs, llama.cpp 1.61×
faster at the E2E p50 on the 2-core AMD EPYC VM); each variant's $ / 1M output tokens is its price per hour over
its throughput (within 0.5 %).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from loadgen.report.quality import ALL_MIXES
from tests.e2e.conftest import llama_server  # noqa: F401  (the llama.cpp tier's server, as a fixture here too)
from tests.integration.harness import read_report, run_loadgen
from tests.vllm_server import MODEL_NAME

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
FIRST_K = 16


def test_vllm_and_llamacpp_on_the_same_weights_in_one_report(
    vllm_server: str,
    llama_server: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    [gguf] = sorted((ROOT / ".cache" / "llama" / "model").glob("*.gguf"))
    greedy = {"temperature": 0, "seed": 1}
    doc = {
        "name": "engines",
        "seed": 9,
        "tokenizer": str(gguf),
        "quality": {"first_k": FIRST_K},
        "variants": [
            {
                "name": "vllm",
                "base_url": vllm_server,
                "model": MODEL_NAME,
                "baseline": True,
                "extra_body": greedy,
                "cost": {"usd_per_hour": 1.2},
            },
            {
                "name": "llamacpp",
                "base_url": llama_server,
                "model": "smollm2",
                "extra_body": greedy,
                "cost": {"usd_per_hour": 0.8},
            },
        ],
        "traffic": {
            "mixes": [{"name": "chat-small", "weight": 1}],
            "custom_mixes": {
                "chat-small": {
                    "buckets": [{"name": "short", "prompt_tokens": [20, 50], "weight": 1}],
                    "output_tokens": [16, 24],
                }
            },
        },
        # One engine at a time, each with the machine to itself but for the load generator's core.
        "load": {"users": 2, "spawn_rate": 2, "duration": "12s", "warmup": 0, "sequential": True},
        "run_trust": {"loop_lag_p99_ms": 500, "cpu_percent_p90": 400, "schedule_slip_p99_ms": 500},
        "slos": [],
        "report_dir": str(tmp_path / "report"),
    }
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = run_loadgen(scenario, "--workers", "0", timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    variants = {v["name"]: v for v in report["variants"]}
    for v in variants.values():
        o = v["overall"]
        assert o["ok"] >= 6 and o["errors"] == {}, (v["name"], o["fates"])
        ce = v["cost_energy"]
        per_hour = {"vllm": 1.2, "llamacpp": 0.8}[v["name"]]
        # Its price over its throughput: $ per hour ÷ (tokens/s × 3600) × 10⁶, the figure the table shows beside it.
        want = per_hour / (o["output_tokens_per_s"] * 3600) * 1e6
        assert ce["cost"]["usd_per_1m_output_tokens"] == pytest.approx(want, rel=5e-3), ce
    speed = variants["llamacpp"]["speedup_vs_baseline"]
    assert speed["e2e_p50"] is not None and speed["e2e_p50"] > 0, speed
    entry = next(e for e in report["quality"]["entries"] if e["variant"] == "llamacpp" and e["mix"] == ALL_MIXES)
    a = entry["agreement"]
    print(entry["headline"], a, speed)
    assert entry["pairs"] >= 6, entry
    assert a["ci_low"] is not None and a["ci_low"] <= a["value"] <= a["ci_high"], a
    assert a["value"] >= 0.5, entry
