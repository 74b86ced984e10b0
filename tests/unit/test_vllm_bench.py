"""`loadgen report --format vllm-bench`: one object per variant in the shape `vllm bench serve --save-result`
writes — every key vLLM writes (its list below, as vLLM's serve.py builds the result), the per-chunk ICL in the itl
fields with a note saying so, and figures that are the records' own (latencies over the successful requests, TTFT
over those that had a first token)."""

from __future__ import annotations

import statistics
from array import array
from pathlib import Path

import orjson
import pytest

from loadgen.cli import main
from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report import build_report, write_reports
from loadgen.report.vllm_bench import render_vllm_bench, vllm_bench_results

# What vLLM's `bench serve --save-result` writes (vllm/benchmarks/serve.py: the setup keys, then benchmark()'s
# result, then mean_/median_/std_/p{percentile}_ for ttft, tpot, itl and e2el; here with --metric-percentiles 50,99),
# without --save-detailed. `latencies` and `queue_times` (per-request lists) are written only from raw records
# (tests/unit/test_vllm_bench_detail.py): this report has none.
VLLM_KEYS = (  # noqa: SIM905 - one string reads as the list it is
    "date endpoint_type backend label model_id tokenizer_id num_prompts request_rate burstiness max_concurrency "
    "duration completed failed total_input_tokens total_output_tokens request_throughput request_goodput "
    "output_throughput total_token_throughput max_output_tokens_per_s max_concurrent_requests rtfx "
    "mean_ttft_ms median_ttft_ms std_ttft_ms p50_ttft_ms p99_ttft_ms mean_tpot_ms median_tpot_ms std_tpot_ms "
    "p50_tpot_ms p99_tpot_ms mean_itl_ms median_itl_ms std_itl_ms p50_itl_ms p99_itl_ms mean_e2el_ms "
    "median_e2el_ms std_e2el_ms p50_e2el_ms p99_e2el_ms"
).split()
NOT_WRITTEN = {"latencies", "queue_times"}

SCENARIO = """
name: vb
seed: 3
variants:
  - {name: base, base_url: "http://127.0.0.1:1", model: m1}
  - {name: fast, base_url: "http://127.0.0.1:2", model: m2}
"""


def _rec(i: int, variant: str, ttft: float, gap: float, chunk: int, error: str | None = None) -> RequestRecord:
    """12 tokens in chunks of `chunk` tokens, `gap` s apart, after `ttft`."""
    sent = 100.0 + i
    rec = RequestRecord(f"{variant}-{i}", variant, "chat", sent=sent, error=error)
    n = 12 // chunk
    rec.chunk_times = array("d", [sent + ttft + gap * k for k in range(n)])
    rec.chunk_tokens = array("l", [chunk] * n)
    rec.done = rec.chunk_times[-1]
    rec.output_tokens, rec.prompt_tokens = 12, 50
    return rec


@pytest.fixture(scope="module")
def report() -> dict:
    agg = Aggregate()
    for i in range(40):
        agg.add(_rec(i, "base", 0.05 + 0.001 * i, 0.02, 1), 0.0)
        # Three tokens per chunk, 30 ms apart: ICL 30 ms, per-token ITL 10 ms. Two requests fail mid-stream.
        agg.add(_rec(i, "fast", 0.04 + 0.001 * i, 0.03, 3, ErrorKind.STREAM_INTERRUPTED if i in (5, 6) else None), 0)
    run = {"workers": {"worker-0": {}}, "untrustworthy_reasons": [], "users_per_variant": {"base": 4, "fast": 4}}
    return build_report(parse_scenario(SCENARIO), agg, 10.0, run)


def test_every_key_vllm_writes_is_there_with_the_note(report: dict) -> None:
    results = vllm_bench_results(report)
    assert [r["label"] for r in results] == ["base", "fast"]
    for r in results:
        missing = [k for k in VLLM_KEYS if k not in r]
        assert missing == [], missing
        assert not NOT_WRITTEN & set(r)
        assert "ICL" in r["loadgen_note"] and "vLLM calls ITL" in r["loadgen_note"]
        assert r["request_rate"] == "inf" and r["max_concurrency"] == 4 and r["duration"] == 10.0


def test_figures_are_the_records_over_successful_requests(report: dict) -> None:
    fast = vllm_bench_results(report)[1]
    ok = [i for i in range(40) if i not in (5, 6)]
    assert (fast["completed"], fast["failed"], fast["num_prompts"]) == (38, 2, 40)
    # ITL fields are the per-chunk gap (30 ms), not the per-token ITL (10 ms).
    assert fast["median_itl_ms"] == pytest.approx(30.0, rel=2e-3) and fast["p99_itl_ms"] == pytest.approx(30, rel=2e-3)
    # TTFT over every request that had a first token (the two that failed mid-stream did), as loadgen measures it.
    firsts = [1e3 * (0.04 + 0.001 * i) for i in range(40)]
    assert fast["mean_ttft_ms"] == pytest.approx(statistics.fmean(firsts), rel=2e-3)
    assert fast["median_ttft_ms"] == pytest.approx(statistics.median_low(firsts), rel=2e-3)
    assert fast["std_ttft_ms"] == pytest.approx(statistics.pstdev(firsts), rel=2e-2)
    assert fast["p99_ttft_ms"] == pytest.approx(max(firsts), rel=2e-3)
    ttfts = [1e3 * (0.04 + 0.001 * i) for i in ok]
    # E2E of a success: TTFT + 3 gaps of 30 ms. TPOT is loadgen's: 90 ms over the 9 tokens after the first chunk
    # (vLLM divides by output tokens - 1, 11: the note says so; with one token per chunk the two agree).
    assert fast["median_e2el_ms"] == pytest.approx(statistics.median_low(t + 90 for t in ttfts), rel=2e-3)
    assert fast["median_tpot_ms"] == pytest.approx(90 / 9, rel=2e-3)
    assert "tokens after the first chunk" in fast["loadgen_note"]
    base = vllm_bench_results(report)[0]
    assert base["median_tpot_ms"] == pytest.approx(20.0, rel=2e-3) == base["median_itl_ms"]  # one token per chunk
    assert fast["total_output_tokens"] == report["variants"][1]["overall"]["output_tokens"]


def test_loadgen_report_writes_one_object_per_line(report: dict, tmp_path: Path) -> None:
    write_reports(report, tmp_path / "r")
    out = tmp_path / "vllm.jsonl"
    code = main(["report", str(tmp_path / "r"), "--format", "vllm-bench", "--out", str(out), "--exit-zero"])
    assert code == 0
    lines = out.read_text().splitlines()
    assert [orjson.loads(x)["label"] for x in lines] == ["base", "fast"]
    assert out.read_text() == render_vllm_bench(report)
