"""Embeddings and rerank against the simulator's truth log: one engine per route, a few seconds of closed loop.

Every request's input tokens (the server's usage) are the words loadgen cut into its items; its E2E is the
simulator's arrival-to-reply time plus the loopback; the report's counts are the raw records and its items a second
are its requests a second times the items each carried.
"""

from __future__ import annotations

from pathlib import Path

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import read_records, read_report, run_loadgen, write_scenario

_ITEMS = {"emb": 8, "rr": 4}


def test_embeddings_and_rerank_are_timed_whole_and_counted_in_items(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    with start_sim_process(["emb=baseline", "rr=baseline"], truth_log=truth_path) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {
                "emb": {
                    "base_url": sim.base_url("emb"),
                    "dialect": "openai-embeddings",
                    "items_per_request": 8,
                    "continuous_usage_stats": False,
                },
                "rr": {
                    "base_url": sim.base_url("rr"),
                    "dialect": "rerank",
                    "items_per_request": 4,
                    "continuous_usage_stats": False,
                },
            },
            traffic={
                "mixes": [{"name": "docs"}],
                "custom_mixes": {
                    "docs": {"buckets": [{"name": "b", "prompt_tokens": [200, 400]}], "output_tokens": [1, 1]}
                },
            },
            load={"users": 8, "spawn_rate": 100, "duration": "4s", "warmup": 0},
            slos=[{"metric": "e2e", "stat": "p99", "max_ms": 5000}, {"metric": "success_rate", "min_percent": 100}],
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = read_report(tmp_path / "report")
    records = read_records(tmp_path / "raw")
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    for v in report["variants"]:
        name, o, p = v["name"], v["overall"], v["pooling"]
        mine = [r for r in records if r["variant"] == name and not r["cut_by_stop"]]
        truth = load_truth(truth_path, variant=name)
        assert v["streamed"] is False and set(o["metrics_ms"]) <= {"e2e", "connect", "queue_delay"}
        assert o["requests"] == o["ok"] == len(mine) > 20
        late = []
        for r in mine:
            t = truth[r["id"]]
            # The server counted exactly the words loadgen sent (no tokenizer: a word is a simulated token).
            assert r["error"] is None and r["prompt_tokens"] == r["prompt_tokens_target"], r["id"]
            assert r["output_tokens"] == 0 and r["chunk_times"] == [] and r["ttft"] is None
            assert t.arrival is not None and t.finish is not None
            late.append(r["e2e"] - (t.finish - t.arrival))
        late.sort()
        print(f"{name}: {len(mine)} requests, E2E above the server's p50 {late[len(late) // 2] * 1e3:.2f} ms")
        assert late[0] >= 0 and late[len(late) // 2] < 0.01  # the loopback and the read: well under 10 ms typically
        assert p["items_per_request"] == _ITEMS[name]
        assert abs(p["items_per_s"] - o["requests_per_s"] * _ITEMS[name]) < 1e-3
        assert f"- {name}: {p['kind']}, {_ITEMS[name]}" in md
