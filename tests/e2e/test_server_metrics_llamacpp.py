"""The real llama.cpp server's own /metrics (started with --metrics) in the report's timeline: the master scrapes
it once a second during a short run, beside the client timeline on the same wall clock."""

from __future__ import annotations

from pathlib import Path

from tests.integration.harness import read_report, run_loadgen, write_scenario


def test_llamacpp_server_metrics_in_the_report(tmp_path: Path, llama_server: str) -> None:
    scenario = write_scenario(
        tmp_path / "s.yaml",
        {"llamacpp": {"base_url": llama_server, "model": "smollm2", "continuous_usage_stats": False}},
        load={"users": 2, "duration": "6s"},
        metrics={"server_scrape_interval": "1s"},
        traffic={
            "mixes": [{"name": "tiny", "weight": 1}],
            "custom_mixes": {"tiny": {"buckets": [{"name": "s", "prompt_tokens": [20, 40], "weight": 1}],
                                      "output_tokens": [8, 16]}},
        },
        slos=[{"metric": "ttft", "stat": "p99", "max_ms": 60000}],
    )  # fmt: skip
    proc = run_loadgen(scenario, "--workers", "1", "--report-dir", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    v = report["variants"][0]
    sm = v["server_metrics"]
    assert sm["source"] == "llamacpp" and sm["note"] is None and sm["samples"] >= 4, sm
    assert sm["url"] == f"{llama_server}/metrics"
    # Its batch (requests_processing) and its token counters as rates: the run's own requests, seen by the server.
    assert max(x for x in sm["series"]["running"] if x is not None) >= 1
    assert max(x for x in sm["series"]["generation_tokens_per_s"] if x is not None) > 0
    t0, tl = v["timeline"]["start_unix_s"], v["timeline"]
    assert t0 - 3 <= sm["t_unix_s"][0] <= sm["t_unix_s"][-1] <= t0 + len(tl["ok"]) * tl["bin_s"] + 3
    assert "| llamacpp | llamacpp |" in (tmp_path / "report" / "report.md").read_text()
