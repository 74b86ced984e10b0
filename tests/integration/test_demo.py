"""The README's main command: `loadgen demo` prints a real report for the three simulated variants."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from ..report_schema import checked


def test_demo_prints_report_with_three_variants_and_faster_tokens(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "demo", "--duration", "16s", "--report-dir", str(tmp_path)],
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
