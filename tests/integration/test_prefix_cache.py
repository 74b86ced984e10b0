"""Cached prompt tokens end to end: the built-in rag mix shares its system prompt between requests, so against the
simulator's `prefix-cache` profile (automatic prefix caching, vLLM's `prompt_tokens_details.cached_tokens` in the
final usage) the report's cached share is above 0; against `baseline` (no prefix caching) the server reports none.
The per-bucket breakdown is there for every bucket of the mix."""

from __future__ import annotations

from pathlib import Path

from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, run_loadgen, write_scenario


def test_prefix_cache_hits_show_as_cached_share(tmp_path: Path) -> None:
    with start_sim_process(["pc=prefix-cache", "base=baseline"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"pc": sim.base_url("pc"), "base": sim.base_url("base")},
            traffic={"mixes": [{"name": "rag", "weight": 1}], "custom_mixes": {}},
            load={"users": 8, "duration": "3s", "warmup": 0},
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = read_report(tmp_path / "report")
    by_name = {v["name"]: v for v in report["variants"]}
    pc, base = by_name["pc"], by_name["base"]
    share = pc["mixes"]["rag"]["cached_prompt_tokens_share"]
    assert share is not None and share > 0
    assert pc["overall"]["cached_prompt_tokens"]["reported_by"] > 0
    assert base["overall"]["cached_prompt_tokens_share"] in (None, 0)
    records = read_records(tmp_path / "raw")
    assert any((r["cached_prompt_tokens"] or 0) > 0 for r in records if r["variant"] == "pc")
    assert all(r["cached_prompt_tokens"] is None for r in records if r["variant"] == "base")
    buckets = pc["mixes"]["rag"]["buckets"]
    assert buckets and sum(b["requests"] for b in buckets.values()) == pc["mixes"]["rag"]["requests"]
    assert all(b["ttft_ms"].get("p50") is not None for b in buckets.values() if b["ok"])
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Prefix cache" in md and "## TTFT and E2E by bucket (ms)" in md
    assert "`base`: the server reported no cached prompt tokens" in md
    print(f"cached share pc={share} base={base['overall']['cached_prompt_tokens_share']}")
