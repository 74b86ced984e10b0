"""Trace context end to end: `tracing:` on a run of one worker (and its master) against the simulator, exporting to
a loopback OTLP/HTTP receiver that decodes what it gets with opentelemetry-proto.

Ground truth: the simulator's truth log, which records the `traceparent` each request arrived with. Checked: every
request carried a W3C header, the one its raw record keeps; the spans received are exactly the records flagged
sampled (count, trace and span ids, attributes, durations); the unsampled share is plausible for `sampled_share:
0.5`; the run's summary gauges equal the report's figures.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from ..otlp_receiver import otlp_receiver
from .harness import read_records, read_report, run_loadgen, write_scenario

_W3C = re.compile(r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-0[01]$")


@pytest.fixture(scope="module")
def traced_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("tracing")
    truth_path = tmp / "truth.jsonl"
    with otlp_receiver() as (url, received), start_sim_process(["fast=baseline"], truth_log=truth_path) as sim:
        scenario = write_scenario(
            tmp / "scenario.yaml",
            {"fast": sim.base_url("fast")},
            load={"users": 6, "duration": "4s", "warmup": "1s"},
            tracing={"sampled_share": 0.5, "otlp_endpoint": url},
        )
        proc = run_loadgen(scenario, "--workers", "1", "--raw-records", str(tmp / "raw"))
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return {
        "records": read_records(tmp / "raw"),
        "truth": load_truth(truth_path),
        "received": received,
        "report": read_report(tmp / "report"),
    }


def test_every_request_carried_the_header_its_record_keeps(traced_run: dict[str, Any]) -> None:
    records, truth = traced_run["records"], traced_run["truth"]
    assert len(records) >= 40
    for r in records:
        assert _W3C.match(r["traceparent"]), r
        assert r["trace_id"] == r["traceparent"][3:35]
        if r["id"] not in truth and r["cut_by_stop"]:
            continue  # (stopped before it went out)
        # What the server received is what loadgen recorded.
        assert truth[r["id"]].traceparent == r["traceparent"], r["id"]
    assert len({r["trace_id"] for r in records}) == len(records)


def test_spans_are_the_sampled_records(traced_run: dict[str, Any]) -> None:
    records, received = traced_run["records"], traced_run["received"]
    sampled = {r["trace_id"]: r for r in records if r["traceparent"].endswith("-01")}
    # 0.5 of >= 40 requests: outside 10-90 % would be a broken decision, not chance (odds below 1e-7).
    assert 0.1 < len(sampled) / len(records) < 0.9, (len(sampled), len(records))
    spans = received.spans
    assert len(spans) == len(sampled)
    assert {s["trace_id"] for s in spans} == set(sampled)
    for s in spans:
        r = sampled[s["trace_id"]]
        assert s["span_id"] == r["traceparent"][36:52] and s["name"] == "loadgen.request"
        a = s["attributes"]
        assert a["loadgen.request_id"] == r["id"] and a["loadgen.variant"] == "fast" and a["loadgen.mix"] == r["mix"]
        assert a["gen_ai.usage.output_tokens"] == (r["output_tokens"] or sum(r["chunk_tokens"]))
        assert a.get("gen_ai.usage.input_tokens") == r["prompt_tokens"]
        assert a["loadgen.outcome"] == ("cut_by_stop" if r["cut_by_stop"] else r["error"] or "ok")
        assert a["loadgen.warmup"] == r["warmup"]
        if r["e2e"] is not None:
            # Wall-clock ns from monotonic seconds: the duration is the record's E2E within float rounding.
            assert abs((s["end_ns"] - s["start_ns"]) / 1e9 - r["e2e"]) < 2e-6
            assert a["loadgen.e2e_s"] == pytest.approx(r["e2e"], abs=1e-9)
        if r["ttft"] is not None:
            assert a["loadgen.ttft_s"] == pytest.approx(r["ttft"], abs=1e-9)
    assert {s["resource"]["service.name"] for s in spans} == {"loadgen"}


def test_the_run_summary_arrives_as_gauges(traced_run: dict[str, Any]) -> None:
    received, report = traced_run["received"], traced_run["report"]
    overall = report["variants"][0]["overall"]
    points = {(p["name"], tuple(sorted(p["attributes"].items()))): p["value"] for p in received.points}
    fast = (("loadgen.variant", "fast"),)
    assert points[("loadgen.requests", fast)] == overall["requests"]
    assert points[("loadgen.exit_code", ())] == report["exit_code"]
    ttft_p99 = points[("loadgen.ttft", (("loadgen.stat", "p99"), *fast))]
    assert ttft_p99 == pytest.approx(overall["metrics_ms"]["ttft"]["p99"] / 1e3, rel=1e-12)
    assert received.paths.count("/v1/metrics") == 1
