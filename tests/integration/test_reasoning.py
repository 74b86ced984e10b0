"""A reasoning model's thinking and answer measured apart, against the simulator's truth.

One run, two variants on one simulator: `think` (the speculative-decoding profile, ~2.5 tokens per chunk, with
`reasoning_tokens: 12`: every chat reply's first 12 tokens stream in `delta.reasoning_content`, a step across the
boundary as two events) and `plain` (baseline, no reasoning: the report has no reasoning for it).

Tolerances, stated: token counts exact (per request and in the report); each request's first answer token received
0–50 ms after the simulator wrote it (the same monotonic clock; the client reads within a few ms on two busy
cores); the report's phase TPOT p50 within 10 % of the truth log's median (the phases span 4–15 engine steps of
~12 ms, so a ms of read jitter is a few %), and its TTFT p50s within 2 % of the raw records' (the histogram's
precision).
"""

from __future__ import annotations

import statistics
from typing import Any

import pytest

from loadgen.report.html import render_html
from loadgen.report.markdown import render_markdown
from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import TruthRequest, load_truth

from .harness import read_records, read_report, run_loadgen, write_scenario

_THINK = 12


@pytest.fixture(scope="module")
def reasoning_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("reasoning")
    truth_path = tmp / "truth.jsonl"
    changes = {"think": {"reasoning_tokens": str(_THINK)}}
    with start_sim_process(
        ["think=spec-decode", "plain=baseline"], truth_log=truth_path, profile_changes=changes
    ) as sim:
        scenario = write_scenario(
            tmp / "scenario.yaml",
            {"think": sim.base_url("think"), "plain": sim.base_url("plain")},
            load={"users": 4, "duration": "5s", "warmup": "1s"},
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp / "raw"))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    counted = [
        r
        for r in read_records(tmp / "raw")
        if r["variant"] == "think" and not r["warmup"] and not r["cut_by_stop"] and r["error"] is None
    ]
    assert len(counted) >= 20
    return {"report": read_report(tmp / "report"), "truth": load_truth(truth_path, variant="think"), "counted": counted}


def _variant(run: dict[str, Any], name: str) -> dict[str, Any]:
    return next(v for v in run["report"]["variants"] if v["name"] == name)


def _truth_phases(t: TruthRequest) -> tuple[list[int], list[int]]:
    """Indices of the truth's thinking chunks and answer chunks (the simulator splits a step at the boundary)."""
    thinking: list[int] = []
    answer: list[int] = []
    before = 0
    for i, n in enumerate(t.chunk_tokens):
        (thinking if before < t.reasoning_tokens else answer).append(i)
        before += n
    return thinking, answer


def _tpot(times: list[float], tokens: list[int]) -> float:
    return (times[-1] - times[0]) / (sum(tokens) - tokens[0])


def test_counts_are_the_truth_logs_request_for_request(reasoning_run: dict[str, Any]) -> None:
    truth = reasoning_run["truth"]
    answer_total = 0
    for r in reasoning_run["counted"]:
        t = truth[r["id"]]
        thinking, answer = _truth_phases(t)
        assert t.reasoning_tokens == _THINK
        assert r["reasoning_chunks"] == list(range(len(thinking)))  # the client marked exactly the thinking chunks
        assert sum(r["chunk_tokens"][i] for i in r["reasoning_chunks"]) == _THINK
        assert r["chunk_tokens"] == t.chunk_tokens
        answer_total += t.output_tokens - _THINK
    x = _variant(reasoning_run, "think")["reasoning"]
    n = len(reasoning_run["counted"])
    print("reasoning", {k: v for k, v in x.items() if k != "mixes"})
    assert x["requests"] == n == x["ok"]
    assert x["reasoning_tokens"] == _THINK * n and x["answer_tokens"] == answer_total
    assert x["counted_by_server"] == 0  # the simulator, like vLLM, sends no completion_tokens_details
    assert x["mixes"]["short"]["requests"] == n
    assert "reasoning" not in _variant(reasoning_run, "plain")


def test_first_answer_and_phase_tpots_against_the_truth_log(reasoning_run: dict[str, Any]) -> None:
    truth = reasoning_run["truth"]
    late, tpot_r, tpot_a, ttft_a, ttft_r = [], [], [], [], []
    for r in reasoning_run["counted"]:
        t = truth[r["id"]]
        thinking, answer = _truth_phases(t)
        first_answer = r["chunk_times"][len(thinking)]
        late.append(first_answer - t.chunk_times[answer[0]])
        ttft_a.append(first_answer - r["sent"])
        ttft_r.append(r["chunk_times"][0] - r["sent"])
        tpot_r.append(_tpot([t.chunk_times[i] for i in thinking], [t.chunk_tokens[i] for i in thinking]))
        tpot_a.append(_tpot([t.chunk_times[i] for i in answer], [t.chunk_tokens[i] for i in answer]))
    print(f"first answer read {min(late) * 1e3:.2f}–{max(late) * 1e3:.2f} ms after its write")
    assert all(-0.001 <= d <= 0.05 for d in late), (min(late), max(late))
    x = _variant(reasoning_run, "think")["reasoning"]
    for key, truth_values in (("tpot_reasoning_ms", tpot_r), ("tpot_answer_ms", tpot_a)):
        expected = statistics.median(truth_values) * 1000
        print(key, x[key]["p50"], f"truth median {expected:.3f}")
        assert x[key]["p50"] == pytest.approx(expected, rel=0.10)
    assert x["ttft_answer_ms"]["p50"] == pytest.approx(statistics.median(ttft_a) * 1000, rel=0.02)
    assert x["ttft_reasoning_ms"]["p50"] == pytest.approx(statistics.median(ttft_r) * 1000, rel=0.02)
    # TTFT is the first token of either kind: here the first thought.
    ttft = _variant(reasoning_run, "think")["overall"]["metrics_ms"]["ttft"]["p50"]
    assert ttft == pytest.approx(x["ttft_reasoning_ms"]["p50"], rel=0.02)
    assert x["ttft_answer_ms"]["p50"] > ttft


def test_markdown_and_html_carry_the_section(reasoning_run: dict[str, Any]) -> None:
    md = render_markdown(reasoning_run["report"])
    n = len(reasoning_run["counted"])
    section = md.split("## Reasoning and answer", 1)[1].split("\n## ", 1)[0]
    assert f"| think | {n} of {n} | 12.0 |" in section and "| plain |" not in section
    assert "<h2>Reasoning and answer</h2>" in render_html(reasoning_run["report"])
