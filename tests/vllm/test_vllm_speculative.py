"""Speculative decoding on vLLM itself: the CPU build runs n-gram (prompt-lookup) drafting, so the report's
speculative figures are checked against vLLM's own counters.

Prompts that ask to repeat a sentence give prompt lookup something to draft from. Held: the acceptance the report
scraped (`spec_decode_num_accepted_tokens` over `num_draft_tokens`, over the window) equals the counters' deltas
over the whole run within 0.05 (the window's edges hold a request or two of ~20), and the draft tokens the client
saw accepted equal vLLM's accepted-token counter within 10 % (+ 3): each step streams its token and the drafts it
accepted in one chunk, which loadgen counts from the usage in every chunk, so Σ (tokens − 1) over the chunks after
each request's first is the accepted drafts (prompt lookup drafts at some steps only: tokens per chunk is not
1 + accepted ÷ drafts).

Beside the acceptance, the speedup: one scenario, two variants run one after another (`load.sequential`: the two
servers share the CPU, so neither is loaded while the other runs), the plain server as baseline and the n-gram one,
on the same prompts, greedy, exact output lengths. Held in that one report: (a) the comparison gives the n-gram
variant's TPOT and E2E p50 speedups, each inside its own 95 % interval (printed, not bounded: a speed figure is this
machine's); the direction is held as a property instead, the forward steps: the plain server streams one token per
chunk (one per step), the n-gram server more than 1.1 on average, and it drafted (a step that verifies k accepted
drafts emits k + 1 tokens); (b) the n-gram variant's acceptance in the report equals vLLM's counters' deltas over its
phase within 0.05; (c) greedy speculative decoding is lossless, so the two variants' replies agree: agreement (the
share of the first 32 token positions, in the model's own tokens, where the n-gram reply's token is the plain one's)
at least 0.8 over at least 4 pairs (measured 1.0). The bound is not 1.0: the verifying step scores several positions
at once, whose float32 sums are not the single-token step's, and a near-tie can flip a token, after which the replies
part. The figures measured on the 2-core AMD EPYC VM: docs/validation.md's vLLM speculative row.
"""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path

import pytest

from loadgen.report.quality import ALL_MIXES
from tests.integration.harness import read_report, run_loadgen, write_scenario
from tests.vllm_server import MODEL_NAME

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]

_SENTENCES = (
    "the red fox jumps over the lazy dog",
    "a cup of tea on a rainy afternoon",
    "seven ships sail across the quiet sea",
    "the old clock in the hall ticks slowly",
)
OUTPUT_TOKENS = 32


def _counters(url: str) -> dict[str, float]:
    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    out = {}
    for name in ("num_drafts", "num_draft_tokens", "num_accepted_tokens"):
        m = re.search(rf"^vllm:spec_decode_{name}_total\{{[^}}]*\}} (\S+)$", text, re.M)
        assert m, f"vLLM serves no vllm:spec_decode_{name}_total"
        out[name] = float(m.group(1))
    return out


def _repeat_rows(path: Path) -> Path:
    """The dataset: each prompt asks to repeat a sentence it holds twice, 32 output tokens."""
    path.write_text(
        "".join(
            json.dumps({"prompt": f"Repeat this sentence three times: {s}. {s}.", "output_tokens": OUTPUT_TOKENS})
            + "\n"
            for s in _SENTENCES
        ),
        encoding="utf-8",
    )
    return path


def test_acceptance_and_tokens_per_chunk_are_vllms_own(vllm_spec_server: str, tmp_path: Path) -> None:
    rows = _repeat_rows(tmp_path / "repeat.jsonl")
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


def test_speedup_beside_acceptance_and_agreement_in_one_report(
    vllm_server: str, vllm_spec_server: str, tmp_path: Path
) -> None:
    rows = _repeat_rows(tmp_path / "repeat.jsonl")
    greedy = {"temperature": 0, "seed": 1}
    scenario = write_scenario(
        tmp_path / "s.yaml",
        {
            "plain": {"base_url": vllm_server, "model": MODEL_NAME, "baseline": True, "extra_body": greedy},
            "ngram": {"base_url": vllm_spec_server, "model": MODEL_NAME, "extra_body": greedy},
        },
        tokenizer=str(_model_dir()),
        quality={"first_k": OUTPUT_TOKENS},
        traffic={"mixes": [{"name": "dataset"}], "dataset": {"path": str(rows)}},
        # One server at a time: both run on CPU 0, so the one not measured must be idle.
        load={"users": 1, "duration": "15s", "warmup": 0, "sequential": True},
        run_trust={"loop_lag_p99_ms": 500, "cpu_percent_p90": 400, "schedule_slip_p99_ms": 500},
        metrics={"server_scrape_interval": 0.5},
        slos=[],
    )
    before = _counters(vllm_spec_server)  # the plain phase sends it nothing: the run's delta is its phase's
    proc = run_loadgen(scenario, "--workers", "0", timeout=300)
    after = _counters(vllm_spec_server)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    assert [p["variant"] for p in report["run"]["phases"]] == ["plain", "ngram"], report["run"]["phases"]
    v = {x["name"]: x for x in report["variants"]}
    for x in v.values():
        o = x["overall"]
        assert o["ok"] >= 4 and o["errors"] == {}, (x["name"], o["fates"])
        assert x["output_length"] == "enforced", x["output_length"]

    # (a) The speedup, with its interval, from the comparison; the direction as a property: fewer forward steps.
    speed = {
        (e["metric"], e["stat"]): e for e in report["comparison"] if e["variant"] == "ngram" and e["stat"] == "p50"
    }
    for metric in ("tpot", "e2e"):
        e = speed[(metric, "p50")]
        print(
            f"ngram {metric} p50 speedup {e['speedup']} ({e['ci_low']}-{e['ci_high']}, {e['source']}, n={e['n']}):"
            f" plain {e['baseline_ms']} ms, ngram {e['variant_ms']} ms"
        )
        assert e["speedup"] is not None and e["ci_low"] is not None and e["ci_high"] is not None, e
        assert e["ci_low"] <= e["speedup"] <= e["ci_high"], e
        assert v["ngram"]["speedup_vs_baseline"][f"{metric}_p50"] == e["speedup"]
    plain_tpc, ngram_tpc = v["plain"]["tokens_per_chunk"], v["ngram"]["tokens_per_chunk"]
    print("tokens per chunk: plain", plain_tpc, "ngram", ngram_tpc)
    assert set(plain_tpc["shares"]) == {"1"} and plain_tpc["mean"] <= 1.0, plain_tpc  # one token per step
    assert ngram_tpc["mean"] > 1.1 and any(int(k) > 1 for k in ngram_tpc["shares"]), ngram_tpc

    # (b) Its acceptance, beside the speedup, is vLLM's own over its phase.
    delta = {k: after[k] - before[k] for k in before}
    assert delta["num_drafts"] > 0 and delta["num_draft_tokens"] > 0, delta
    acceptance = delta["num_accepted_tokens"] / delta["num_draft_tokens"]
    seen = v["ngram"]["server_metrics"]["summary"]["spec_acceptance"]
    print("ngram acceptance: report", seen, "vLLM's counters", round(acceptance, 4), delta)
    assert seen == pytest.approx(acceptance, abs=0.05)

    # (c) Lossless: the greedy replies agree, within what float32 verification of several positions at once allows.
    assert report["quality"]["method"]["tokens"] == "tokenizer", report["quality"]["method"]
    entry = next(e for e in report["quality"]["entries"] if e["variant"] == "ngram" and e["mix"] == ALL_MIXES)
    a = entry["agreement"]
    print(entry["headline"], a, "exact match", entry["exact_match"])
    assert entry["pairs"] >= 4, entry
    assert a["ci_low"] is not None and a["ci_low"] <= a["value"] <= a["ci_high"], a
    assert a["value"] >= 0.8, entry


def _model_dir() -> Path:
    """The converted model the servers load (its tokenizer.json: the model's own tokens for the agreement)."""
    cache = Path(os.environ.get("LOADGEN_VLLM_CACHE", ROOT / ".cache" / "vllm"))
    return cache / "smollm2-135m-instruct"
