"""bench/peer_outputs.py reads each tool's own output files as the tools wrote them: the fixtures are real output of
loadgen, AIPerf 0.13, inference-perf 0.7 and GuideLLM 0.8.1 against bench/server.py (k = 1, 10 ms per token, 64
tokens; cut to a few requests), each with the server's truth log for the same requests. A tool release that renames a
field fails here rather than turning the comparison's figures into blanks or zeros."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.peer_grade import TruthIndex, arrival_parity, cpu_over, grade
from bench.peer_outputs import READERS, PeerRequest, read_loadgen
from bench.server import prompt_key

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "peers"


def _read(tool: str) -> tuple[list[PeerRequest], object]:
    d = FIXTURES / tool
    if tool == "loadgen":
        return read_loadgen(d / "raw", d / "report.json")
    return READERS[tool](d / "benchmarks.json" if tool == "guidellm" else d)


@pytest.mark.parametrize("tool", ["loadgen", "aiperf", "inference-perf", "guidellm"])
def test_every_request_is_read_and_found_in_the_truth(tool: str) -> None:
    records, summary = _read(tool)
    assert len(records) >= 3 and all(r.ok for r in records)
    index = TruthIndex.load(FIXTURES / tool / "truth.jsonl")
    for r in records:
        t = index.find(r.match)
        assert t is not None, r.match
        # A tool sees the first token after the server wrote it (1 ms: the clocks of two processes), and its own
        # delays add at most a fraction of a second here.
        assert r.ttft_ms is not None and -1 < r.ttft_ms - (t.chunk_times[0] - t.arrival) * 1e3 < 1000  # type: ignore[operator]
        assert r.itl_ms is not None and 5 < r.itl_ms < 20
        assert r.output_tokens == sum(t.chunk_tokens) == 64
    assert {"ttft_p50", "ttft_p99", "itl_p50", "itl_p99"} <= set(summary.pcts)  # type: ignore[attr-defined]
    assert all(0 <= v < 1000 for v in summary.pcts.values())  # type: ignore[attr-defined]  # ms, not seconds
    assert summary.requests > 0  # type: ignore[attr-defined]


def test_how_each_tool_identifies_its_requests() -> None:
    # loadgen and AIPerf send an X-Request-ID the server logs; inference-perf and GuideLLM send none, so their
    # requests are found by the fingerprint of the prompt they wrote, which the truth log's arrival carries.
    assert all(r.match.startswith("rid:") for r in _read("loadgen")[0] + _read("aiperf")[0])
    for tool in ("inference-perf", "guidellm"):
        assert all(r.match.startswith("key:") and r.match != "key:?" for r in _read(tool)[0])
    assert prompt_key("the of and") == prompt_key("the of and") != prompt_key("the of  and")


def test_chunk_times_where_the_tool_keeps_them() -> None:
    for tool in ("loadgen", "aiperf", "inference-perf"):
        records, _ = _read(tool)
        index = TruthIndex.load(FIXTURES / tool / "truth.jsonl")
        for r in records:
            t = index.find(r.match)
            assert t is not None and r.chunk_gaps_ms is not None and len(r.chunk_gaps_ms) == 63, tool
            # The chunks a tool read span what the server wrote (63 gaps of 10 ms), give or take its own delays.
            span = (t.chunk_times[-1] - t.chunk_times[0]) * 1e3
            assert min(r.chunk_gaps_ms) >= 0 and abs(sum(r.chunk_gaps_ms) - span) < 0.2 * span, tool
    # GuideLLM keeps the first and last token's times and a count: nothing per chunk.
    assert all(r.chunk_gaps_ms is None for r in _read("guidellm")[0])


@pytest.mark.parametrize("tool", ["loadgen", "aiperf", "inference-perf", "guidellm"])
def test_graded_against_the_truth(tool: str) -> None:
    records, summary = _read(tool)
    index = TruthIndex.load(FIXTURES / tool / "truth.jsonl")
    index.lo, index.hi = -math.inf, math.inf  # a few requests: every one counts
    g = grade(records, summary, index)  # type: ignore[arg-type]
    assert g["requests"]["matched"] == len(records) and g["requests"]["unmatched"] == 0
    assert -1 < g["added_ttft_p50"] <= g["added_ttft_p99"] < 1000
    p = g["parity"]
    assert p["output_tokens_tool"] == p["output_tokens_server"] == 64 * len(records)
    assert p["prompt_tokens_tool"] == p["prompt_tokens_server"] > 0
    assert g["chunk_timings_kept"] is (tool != "guidellm")
    assert (g["chunk_gap_abs_err_per_token_p99"] is None) is (tool == "guidellm")


def test_arrivals_and_cpu_windows() -> None:
    index = TruthIndex.load(FIXTURES / "loadgen" / "truth.jsonl")
    index.lo, index.hi = -math.inf, math.inf
    a = arrival_parity(index, 50.0)
    assert a["arrivals"] == len(index.by_rid) and a["gap_ms_ideal"] == 20.0
    samples = [(0.0, 1.0), (1.0, 1.5), (2.0, 2.5)]
    assert cpu_over(samples, 0.5, 1.5) == pytest.approx(0.75)
    assert cpu_over(samples, -1.0, 1.0) is None
