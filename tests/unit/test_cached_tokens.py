"""Cached prompt tokens from the server's usage (OpenAI / vLLM `prompt_tokens_details.cached_tokens`, llama.cpp
`timings.cache_n`) into records, aggregates and the report; and the per-bucket breakdown."""

from __future__ import annotations

from array import array

import orjson

from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import WIRE_VERSION, Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect
from loadgen.report import build_report, render_markdown

SCENARIO = """
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m}
  - {name: b, base_url: "http://127.0.0.1:2", model: m}
"""


def _sse(*objs: object) -> bytes:
    return b"".join(b"data: " + (o if isinstance(o, bytes) else orjson.dumps(o)) + b"\n\n" for o in objs)


def _stream(dialect: str, body: bytes) -> RequestRecord:
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, get_dialect(dialect))
    acc.feed(1.0, body)
    return acc.finish(2.0)


def test_vllm_final_usage_gives_cached_prompt_tokens() -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 64}}
    body = _sse(
        {"choices": [{"delta": {"content": "a"}}]},
        {"choices": [{"delta": {"content": "b"}, "finish_reason": "stop"}]},
        {"choices": [], "usage": usage},
        b"[DONE]",
    )
    rec = _stream("openai-chat", body)
    assert rec.ok and (rec.prompt_tokens, rec.cached_prompt_tokens) == (100, 64)


def test_no_details_or_odd_values_leave_it_none() -> None:
    for details in (None, {}, {"cached_tokens": None}, {"cached_tokens": True}, {"cached_tokens": -1}, 5):
        usage: dict[str, object] = {"prompt_tokens": 10, "completion_tokens": 1}
        if details is not None:
            usage["prompt_tokens_details"] = details
        body = _sse({"choices": [{"text": "a"}]}, {"choices": [], "usage": usage}, b"[DONE]")
        rec = _stream("openai-completions", body)
        assert rec.ok and rec.cached_prompt_tokens is None, details


def test_llamacpp_oai_timings_cache_n() -> None:
    timings = {"cache_n": 30, "prompt_n": 10, "prompt_ms": 5.0, "predicted_n": 1}
    body = _sse(
        {"choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}], "timings": timings},
        {"choices": [], "usage": {"prompt_tokens": 40, "completion_tokens": 1}},
        b"[DONE]",
    )
    rec = _stream("openai-chat", body)
    assert (rec.prompt_tokens, rec.cached_prompt_tokens) == (40, 30)


def test_llamacpp_native_cache_n() -> None:
    final = {
        "content": "",
        "stop": True,
        "tokens_predicted": 2,
        "tokens_evaluated": 50,
        "stop_type": "eos",
        "timings": {"cache_n": 48, "prompt_n": 2, "predicted_n": 2},
    }
    body = _sse({"content": "a", "stop": False, "tokens_predicted": 1}, final)
    rec = _stream("llamacpp", body)
    assert rec.ok and (rec.prompt_tokens, rec.cached_prompt_tokens) == (50, 48)


def test_tgi_and_ollama_report_none() -> None:
    tgi = b'data:{"index":1,"token":{"id":1,"text":"a","special":false},"generated_text":"a",'
    tgi += b'"details":{"finish_reason":"eos_token","generated_tokens":1,"input_length":7}}\n\n'
    assert _stream("tgi", tgi).cached_prompt_tokens is None
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, get_dialect("ollama-chat"))
    acc.feed(1.0, b'{"message":{"content":"a"},"done":false}\n')
    acc.feed(1.1, b'{"message":{"content":""},"done":true,"prompt_eval_count":3,"eval_count":1}\n')
    assert acc.finish(2.0).ok and rec.cached_prompt_tokens is None


def test_raw_rows_carry_it() -> None:
    rec = RequestRecord("r", "v", "m", "short", cached_prompt_tokens=16)
    row = orjson.loads(orjson.dumps(rec.to_json()))
    assert row["cached_prompt_tokens"] == 16
    assert RequestRecord.from_json(row).cached_prompt_tokens == 16
    assert RequestRecord.from_json({"id": "x", "variant": "v", "mix": "m"}).cached_prompt_tokens is None


def _ok(i: int, variant: str, mix: str, bucket: str, cached: int | None, ttft: float = 0.05) -> RequestRecord:
    times = array("d", [100.0 + ttft + 0.01 * k for k in range(4)])
    rec = RequestRecord(f"{variant}-{i}", variant, mix, bucket, sent=100.0, chunk_times=times)
    rec.chunk_tokens = array("l", [1] * 4)
    rec.done = times[-1]
    rec.output_tokens = 4
    rec.prompt_tokens = 100
    rec.cached_prompt_tokens = cached
    return rec


def test_aggregate_counts_cached_tokens_of_the_requests_that_reported_them_over_the_wire() -> None:
    worker, master = Aggregate(), Aggregate()
    worker.add(_ok(1, "a", "chat", "short", 60), 1.0)
    worker.add(_ok(2, "a", "chat", "short", 0), 1.0)
    worker.add(_ok(3, "a", "chat", "long", None), 1.0)  # did not report: not in the share
    wire = worker.pop_delta(histograms=False)
    assert wire["v"] == WIRE_VERSION
    master.merge_wire(wire)
    worker.add(_ok(4, "a", "chat", "long", 40), 1.0)
    master.merge_wire(worker.pop_delta())
    g = master.group("a", "chat")
    assert (g.cache_reported, g.cache_prompt_tokens, g.cached_prompt_tokens, g.prompt_tokens) == (3, 300, 100, 400)
    short, long_ = master.bucket("a", "chat", "short"), master.bucket("a", "chat", "long")
    assert (short.requests, short.ok, short.hists["ttft"].count) == (2, 2, 2)
    assert (long_.requests, long_.hists["e2e"].count) == (2, 2)


def test_report_gives_the_cached_share_and_says_when_the_server_reports_none() -> None:
    agg = Aggregate()
    for i in range(4):
        agg.add(_ok(i, "a", "rag", "short", 75), 0.0)
        agg.add(_ok(i, "b", "rag", "short", None), 0.0)
    failed = RequestRecord("a-f", "a", "rag", "long", sent=100.0, error=ErrorKind.TIMEOUT, done=130.0)
    agg.add(failed, 0.0)
    agg.add(_ok(9, "a", "rag", "long", 75, ttft=0.5), 0.0)
    report = build_report(parse_scenario(SCENARIO), agg, 10.0)
    a, b = report["variants"]
    assert (
        a["overall"]["cached_prompt_tokens_share"] == 0.75 and a["mixes"]["rag"]["cached_prompt_tokens_share"] == 0.75
    )
    assert b["overall"]["cached_prompt_tokens_share"] is None
    buckets = a["mixes"]["rag"]["buckets"]
    assert set(buckets) == {"short", "long"}
    assert (buckets["short"]["requests"], buckets["short"]["ok"]) == (4, 4)
    assert buckets["short"]["ttft_ms"]["p50"] == 50.0 or abs(buckets["short"]["ttft_ms"]["p50"] - 50.0) < 0.5
    assert (buckets["long"]["requests"], buckets["long"]["ok"]) == (2, 1)
    assert buckets["long"]["e2e_ms"]["p99"] is None and buckets["long"]["e2e_ms"]["censored"] == 1
    md = render_markdown(report)
    assert "## Prefix cache" in md and "75.0 %" in md
    assert "`b`: the server reported no cached prompt tokens" in md
    assert "## TTFT and E2E by bucket (ms)" in md and "| a | rag | long | 2 | 1 |" in md
    orjson.dumps(report)
