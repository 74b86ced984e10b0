"""The anthropic-messages dialect's timings against the simulator's ground truth, with the OpenAI dialect's
tolerances (test_accuracy.py): per request, TTFT and per-token ITL errors have median |error| <= 0.2 ms and p99
<= 1 ms, errors measured outside each write's own interval (harness.compare_with_truth).

The simulator's Messages route writes one `content_block_delta` per token (as llama.cpp's server does), all of an
engine step's in its one write: spec-decode puts several deltas in one write, each read as its own token chunk at
the write's arrival stamp. Most reads are taken by the C half of the read: every read of one delta in its HTTP chunk
(llama.cpp's framing; 93 % of the reads of a baseline-only run, openai-chat's 95 %), not the simulator's spec-decode
writes, one HTTP chunk holding a step's several events, which the C half leaves to Python (64 % of this run's reads).
"""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import compare_with_truth, quantile, read_records, read_report, run_loadgen, write_scenario

_VARIANTS = ("baseline", "spec-decode")


@pytest.fixture(scope="module")
def accuracy_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("accuracy-anthropic")
    truth_path = tmp / "truth.jsonl"
    with start_sim_process(list(_VARIANTS), truth_log=truth_path) as sim:
        variants = {
            name: {"base_url": sim.base_url(name), "dialect": "anthropic-messages", "continuous_usage_stats": False}
            for name in _VARIANTS
        }
        scenario = write_scenario(tmp / "scenario.yaml", variants, load={"users": 24, "duration": "8s"})
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {
        "records": read_records(tmp / "raw"),
        "truth": {v: load_truth(truth_path, variant=v) for v in _VARIANTS},
        "report": read_report(tmp / "report"),
    }


@pytest.mark.parametrize("variant", _VARIANTS)
def test_ttft_and_per_token_itl_match_ground_truth(accuracy_run: dict[str, Any], variant: str) -> None:
    records = [r for r in accuracy_run["records"] if r["variant"] == variant]
    assert len(records) >= 30
    truth = accuracy_run["truth"][variant]
    errs = compare_with_truth(records, truth)  # every record's chunk tokens are the truth's, one per delta
    for metric in ("ttft", "itl"):
        abs_err = [abs(e) for e in errs[metric]]
        med, p99 = quantile(abs_err, 0.5), quantile(abs_err, 0.99)
        print(f"{variant} {metric}: n={len(abs_err)} median |err| {med * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms")
        assert med <= 0.0002, (metric, med)
        assert p99 <= 0.001, (metric, p99)
    assert min(errs["ttft"]) > -0.0005  # a client timestamp never precedes the server's write
    for r in records:
        if r["error"] is None and not r["cut_by_stop"]:
            t = truth[r["id"]]
            assert r["output_tokens"] == t.output_tokens == sum(r["chunk_tokens"]) == r["max_tokens"], r["id"]
            assert r["prompt_tokens"] == r["prompt_tokens_target"] and r["finish_reason"] == "length", r["id"]


def test_counts_come_one_per_delta_and_the_c_half_read_most_of_them(accuracy_run: dict[str, Any]) -> None:
    report = accuracy_run["report"]
    for v in report["variants"]:
        assert list(v["overall"]["token_count_source"]) == ["one_per_chunk"], v["name"]
        n = sum(1 for r in accuracy_run["records"] if r["variant"] == v["name"])
        o = v["overall"]
        assert o["requests"] + o["warmup_excluded"] + o["cut_by_stop"] == n
    workers = report["run"]["workers"]
    print({wid: w.get("read_delay") for wid, w in workers.items()})
    assert workers and all(w["read_delay"]["in_c_share"] > 0.5 for w in workers.values())
