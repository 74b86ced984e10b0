"""The README's main command: `loadgen demo` prints a real report for the three simulated variants."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from ..report_schema import checked


def test_demo_prints_report_with_three_variants_and_faster_tokens(tmp_path: Path) -> None:
    # 10 s: shorter than the file's 10 s warm-up, which the demo then cuts to a quarter of the run.
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "demo", "--duration", "10s", "--report-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "# loadgen report — demo" in out and "## TTFT (ms)" in out and "## Speedup vs baseline" in out
    report = checked(orjson.loads((tmp_path / "report.json").read_bytes()))
    variants = {v["name"]: v for v in report["variants"]}
    assert set(variants) == {"baseline", "int8", "spec-decode"}
    tpot = {n: v["overall"]["metrics_ms"]["tpot"]["p50"] for n, v in variants.items()}
    # The profiles: int8 steps are 0.6× baseline's; spec-decode emits ~2.5 tokens per 1.25× step.
    assert tpot["int8"] < 0.8 * tpot["baseline"], tpot
    assert tpot["spec-decode"] < 0.8 * tpot["baseline"], tpot
    assert all(v["overall"]["ok"] > 0 for v in variants.values())
    assert report["run"]["trustworthy"], report["run"]
    assert report["run"]["warmup_s"] == 2.5
    # Not speed alone: quality (the simulated int8 changes 2 % of a greedy reply's tokens, speculative decoding none)
    # and $ / 1M output tokens, side by side under the summary.
    assert "## Speed, quality and cost" in out and out.index("## Speed, quality and cost") < out.index("## TTFT (ms)")
    agreement = {e["variant"]: e["agreement"]["value"] for e in report["quality"]["entries"] if e["mix"] == "*"}
    assert 0.9 < agreement["int8"] < 1.0 and agreement["spec-decode"] == 1.0, agreement
    costs = {n: v["cost_energy"]["cost"]["usd_per_1m_output_tokens"] for n, v in variants.items()}
    assert costs["int8"] < costs["baseline"] and costs["spec-decode"] < costs["baseline"], costs  # faster, same price
    # The default SLOs, as demo.yaml says: TTFT p99, E2E p99 and the success rate.
    assert {s["slo"] for s in report["slos"]} == {"ttft p99 ≤ 3000 ms", "e2e p99 ≤ 10000 ms", "success rate ≥ 99 %"}
