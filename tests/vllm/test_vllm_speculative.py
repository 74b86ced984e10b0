"""Speculative decoding on vLLM itself: the CPU build runs n-gram (prompt-lookup) drafting, so the report's
speculative figures are checked against vLLM's own counters.

Prompts that ask to repeat a sentence give prompt lookup something to draft from. Held: the acceptance the report
scraped (`spec_decode_num_accepted_tokens` over `num_draft_tokens`, over the window) equals the counters' deltas
over the whole run within 0.05 (the window's edges hold a request or two of ~20), and the draft tokens the client
saw accepted equal vLLM's accepted-token counter within 10 % (+ 3): each step streams its token and the drafts it
accepted in one chunk, which loadgen counts from the usage in every chunk, so Σ (tokens − 1) over the chunks after
each request's first is the accepted drafts (prompt lookup drafts at some steps only: tokens per chunk is not
1 + accepted ÷ drafts).
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.integration.harness import read_report, run_loadgen, write_scenario
from tests.vllm_server import MODEL_NAME

pytestmark = pytest.mark.vllm

_SENTENCES = (
    "the red fox jumps over the lazy dog",
    "a cup of tea on a rainy afternoon",
    "seven ships sail across the quiet sea",
    "the old clock in the hall ticks slowly",
)


def _counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        m = re.search(rf"^vllm:spec_decode_{name}_total\{{[^}}]*\}} (\S+)$", text, re.M)
        assert m, f"vLLM serves no vllm:spec_decode_{name}_total"
        out[name] = float(m.group(1))
    return out


def test_acceptance_and_tokens_per_chunk_are_vllms_own(vllm_spec_server: str, tmp_path: Path) -> None:
    rows = tmp_path / "repeat.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"prompt": f"Repeat this sentence three times: {s}. {s}.", "output_tokens": 32}) + "\n"
            for s in _SENTENCES
        ),
        encoding="utf-8",
    )
    scenario = write_scenario(
        tmp_path / "s.yaml",
        {"spec": {"base_url": vllm_spec_server, "model": MODEL_NAME, "extra_body": {"temperature": 0}}},
        traffic={"mixes": [{"name": "dataset"}], "dataset": {"path": str(rows)}},
        load={"users": 1, "duration": "15s", "warmup": 0},
        run_trust={"loop_lag_p99_ms": 500, "cpu_percent_p90": 400, "schedule_slip_p99_ms": 500},
        metrics={"server_scrape_interval": 0.5},
    )
    before = _counters(vllm_spec_server)
    proc = run_loadgen(scenario, "--workers", "0", timeout=300)
    after = _counters(vllm_spec_server)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    v = read_report(tmp_path / "report")["variants"][0]
    delta = {k: after[k] - before[k] for k in before}
    assert delta["num_drafts"] > 0 and delta["num_draft_tokens"] > 0, delta
    acceptance = delta["num_accepted_tokens"] / delta["num_draft_tokens"]
    summary = v["server_metrics"]["summary"]
    tpc = v["tokens_per_chunk"]
    seen_accepted = tpc["chunks"] * (tpc["mean"] - 1)  # Σ (tokens − 1) over the chunks after each first
    print("acceptance", acceptance, summary.get("spec_acceptance"), "accepted", delta, seen_accepted, tpc)
    assert summary["spec_acceptance"] == pytest.approx(acceptance, abs=0.05)
    assert abs(seen_accepted - delta["num_accepted_tokens"]) <= 3 + 0.10 * delta["num_accepted_tokens"]
    assert acceptance > 0.1  # prompt lookup found the sentence it was asked to repeat
