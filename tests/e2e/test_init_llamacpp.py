"""`loadgen init URL` against a real llama-server: recognised as llama.cpp, its context read from `/props`, and the
starter it writes runs as written (`loadgen run`, exit 0), only shortened and with one user."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from loadgen.cli import main

from ..integration.harness import read_report, run_loadgen


def test_init_then_run_against_llamacpp(llama_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "scenario.yaml"
    # One user: the engine has one thread; the starter's own four would only make the run longer.
    assert main(["init", llama_server + "/v1", "--out", str(out), "--users", "1"]) == 0
    printed = capsys.readouterr().out
    assert f"found llama.cpp at {llama_server}" in printed and "SmolLM2-135M-Instruct" in printed
    assert main(["validate", str(out)]) == 0
    doc = yaml.safe_load(out.read_text())
    (variant,) = doc["variants"]
    assert variant["base_url"] == llama_server
    assert (variant["dialect"], variant["extra_body"]) == ("openai-chat", {"timings_per_token": True})
    # The fixture's server: -c 8192 over 4 slots, 2048 tokens each: too short for the chat mix's 4000 + 500.
    fitted = doc["traffic"]["custom_mixes"]["chat-fit"]
    assert max(b["prompt_tokens"][1] for b in fitted["buckets"]) + fitted["output_tokens"][1] <= 0.8 * 2048

    proc = run_loadgen(out, "--duration", "4s", "--workers", "0", "--report-dir", str(tmp_path / "report"), timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    (v,) = report["variants"]
    assert (v["model"], v["dialect"]) == (variant["model"], "openai-chat")
    overall = v["overall"]
    assert overall["ok"] >= 1 and overall["success_rate"] == 1.0 and overall["cut_by_stop"] == 0
