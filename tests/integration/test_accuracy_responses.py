"""The openai-responses dialect's timings against the simulator's ground truth, with the OpenAI dialect's tolerances
(test_accuracy.py): per request, TTFT and per-token ITL errors have median |error| <= 0.2 ms and p99 <= 1 ms, errors
measured outside each write's own interval (harness.compare_with_truth).

The Responses API streams no per-event token count, only the final usage, and the simulator's Responses route writes
one `response.output_text.delta` per engine step (as vLLM does), carrying the step's tokens:
- `baseline` (one token a step): one token an event is exact, and most reads are the C half's (every delta in its
  own HTTP chunk with its `event:` line);
- `spec-decode` (1 to 4 tokens a step): the final usage spread evenly would not be the truth's per-event counts, so
  that run names a `tokenizer` (the simulator's own word-level vocabulary, test_tokenizer_chunk_counts.py), which
  counts each event's text exactly; such streams keep their text and read on the Python path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import compare_with_truth, quantile, read_records, read_report, run_loadgen, write_scenario
from .test_tokenizer_chunk_counts import _write_tokenizer


def _run(tmp: Path, variant: str, **over: Any) -> dict[str, Any]:
    truth_path = tmp / "truth.jsonl"
    with start_sim_process([variant], truth_log=truth_path) as sim:
        target = {"base_url": sim.base_url(variant), "dialect": "openai-responses", "continuous_usage_stats": False}
        scenario = write_scenario(
            tmp / "scenario.yaml", {variant: target}, load={"users": 24, "duration": "8s"}, **over
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {
        "records": read_records(tmp / "raw"),
        "truth": load_truth(truth_path, variant=variant),
        "report": read_report(tmp / "report"),
    }


@pytest.fixture(scope="module")
def baseline_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(tmp_path_factory.mktemp("responses-baseline"), "baseline")


@pytest.fixture(scope="module")
def spec_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("responses-spec")
    return _run(tmp, "spec-decode", tokenizer=str(_write_tokenizer(tmp / "tokenizer.json")))


def _check(run: dict[str, Any], name: str) -> None:
    records, truth = run["records"], run["truth"]
    assert len(records) >= 30
    errs = compare_with_truth(records, truth)  # every record's chunk tokens are the truth's
    for metric in ("ttft", "itl"):
        abs_err = [abs(e) for e in errs[metric]]
        med, p99 = quantile(abs_err, 0.5), quantile(abs_err, 0.99)
        print(f"{name} {metric}: n={len(abs_err)} median |err| {med * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms")
        assert med <= 0.0002, (metric, med)
        assert p99 <= 0.001, (metric, p99)
    assert min(errs["ttft"]) > -0.0005  # a client timestamp never precedes the server's write
    for r in records:
        if r["error"] is None and not r["cut_by_stop"]:
            t = truth[r["id"]]
            assert r["output_tokens"] == t.output_tokens == sum(r["chunk_tokens"]) == r["max_tokens"], r["id"]
            assert r["prompt_tokens"] == r["prompt_tokens_target"] and r["finish_reason"] == "length", r["id"]
    report = run["report"]
    for v in report["variants"]:
        o = v["overall"]
        assert o["requests"] + o["warmup_excluded"] + o["cut_by_stop"] == len(records)


def test_baseline_ttft_and_itl_match_ground_truth_and_the_c_half_read_most(baseline_run: dict[str, Any]) -> None:
    _check(baseline_run, "baseline")
    report = baseline_run["report"]
    assert list(report["variants"][0]["overall"]["token_count_source"]) == ["one_per_chunk"]
    workers = report["run"]["workers"]
    print({wid: w.get("read_delay") for wid, w in workers.items()})
    assert workers and all(w["read_delay"]["in_c_share"] > 0.5 for w in workers.values())


def test_spec_decode_with_a_tokenizer_counts_every_event_exactly(spec_run: dict[str, Any]) -> None:
    _check(spec_run, "spec-decode")
    rows = [r for r in spec_run["records"] if r["error"] is None and not r["cut_by_stop"]]
    assert sum(1 for r in rows for k in r["chunk_tokens"] if k > 1) > 100  # several tokens in many events
    assert list(spec_run["report"]["variants"][0]["overall"]["token_count_source"]) == ["tokenizer"]
