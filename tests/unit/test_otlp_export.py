"""OTLP export (live/otlp.py) against a loopback OTLP/HTTP receiver that decodes what it gets with
opentelemetry-proto: spans equal the records they come from (ids, times, attributes, outcome), only sampled requests
become spans, and the run's summary arrives as gauges equal to the report's figures."""

from __future__ import annotations

import socket
import sys
import time
from array import array
from typing import Any

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from loadgen.live.otlp import SPAN_NAME, SpanExport, export_run_metrics
from loadgen.measure.records import ErrorKind, RequestRecord, TokenSource
from loadgen.preflight import parse_checked
from loadgen.protocol.traceparent import TraceContext

from ..otlp_receiver import otlp_receiver

_SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
_FAILED = "00-1bf7651916cd43dd8448eb211c80319d-c7ad6b7169203332-01"
_UNSAMPLED = "00-2cf7651916cd43dd8448eb211c80319e-d7ad6b7169203333-00"


def _scenario(endpoint: str) -> Any:
    return parse_scenario(
        "name: otlp-unit\n"
        "variants: [{name: fast, base_url: 'http://127.0.0.1:1', model: tiny-model}]\n"
        f"tracing: {{otlp_endpoint: '{endpoint}'}}\n"
    )


def _ok_record() -> RequestRecord:
    rec = RequestRecord("r1-fast-0-3", "fast", "chat", "short", sent=1000.0, done=1000.75, status=200)
    rec.chunk_times, rec.chunk_tokens = array("d", [1000.125, 1000.5, 1000.7]), array("l", [1, 2, 1])
    rec.token_source = TokenSource.SERVER
    rec.prompt_tokens, rec.output_tokens, rec.max_tokens = 42, 4, 4
    rec.finish_reason, rec.traceparent = "length", _SAMPLED
    return rec


def test_sampled_records_become_spans_with_the_ids_they_carried() -> None:
    to_wall = 1_700_000_000.0
    failed = RequestRecord("r1-fast-0-4", "fast", "chat", sent=1001.0, done=1001.5, status=503, traceparent=_FAILED)
    failed.error = ErrorKind.HTTP_5XX
    unsampled = RequestRecord("r1-fast-0-5", "fast", "chat", sent=1002.0, done=1002.5, traceparent=_UNSAMPLED)
    bare = RequestRecord("r1-fast-0-6", "fast", "chat", sent=1003.0, done=1003.5)
    with otlp_receiver() as (url, got):
        export = SpanExport(_scenario(url), url, "w-test")
        for rec in (_ok_record(), failed, unsampled, bare):
            export.add(rec, to_wall)
        export.flush()
        export.close()
    assert export.spans == 2
    assert got.paths and set(got.paths) == {"/v1/traces"}
    spans = {s["trace_id"]: s for s in got.spans}
    assert set(spans) == {_SAMPLED[3:35], _FAILED[3:35]}  # the unsampled and the header-less ones are no spans
    ok = spans[_SAMPLED[3:35]]
    assert ok["span_id"] == _SAMPLED[36:52] and ok["parent_span_id"] == ""
    assert ok["name"] == SPAN_NAME and ok["kind"] == Span.SPAN_KIND_CLIENT and ok["scope"] == "loadgen"
    assert ok["start_ns"] == round((1000.0 + to_wall) * 1e9) and ok["end_ns"] == round((1000.75 + to_wall) * 1e9)
    assert ok["status_code"] == Status.STATUS_CODE_UNSET
    assert ok["attributes"] == {
        "loadgen.request_id": "r1-fast-0-3",
        "loadgen.variant": "fast",
        "loadgen.mix": "chat",
        "loadgen.bucket": "short",
        "loadgen.outcome": "ok",
        "loadgen.fate": "succeeded",
        "loadgen.warmup": False,
        "gen_ai.request.model": "tiny-model",
        "gen_ai.request.max_tokens": 4,
        "gen_ai.usage.input_tokens": 42,
        "gen_ai.usage.output_tokens": 4,
        "gen_ai.response.finish_reasons": ["length"],
        "http.response.status_code": 200,
        "loadgen.ttft_s": 0.125,
        "loadgen.tpot_s": (1000.7 - 1000.125) / 3,
        "loadgen.e2e_s": 0.75,
    }
    assert ok["resource"]["service.name"] == "loadgen" and ok["resource"]["service.instance.id"] == "w-test"
    assert ok["resource"]["loadgen.scenario"] == "otlp-unit"
    bad = spans[_FAILED[3:35]]
    assert bad["status_code"] == Status.STATUS_CODE_ERROR
    assert bad["attributes"]["error.type"] == "http_5xx" and bad["attributes"]["loadgen.outcome"] == "http_5xx"
    assert bad["attributes"]["loadgen.fate"] == "failed"
    assert bad["attributes"]["http.response.status_code"] == 503


def test_headers_come_from_the_environment_only(monkeypatch: Any) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20s3cret,x-tenant=loadgen")
    monkeypatch.setenv("OTEL_SERVICE_NAME", "bench-client")
    with otlp_receiver() as (url, got):
        export = SpanExport(_scenario(url), url, "w-test")
        export.add(_ok_record(), 0.0)
        export.flush()
        export.close()
    assert got.headers[0]["authorization"] == "Bearer s3cret" and got.headers[0]["x-tenant"] == "loadgen"
    assert got.spans[0]["resource"]["service.name"] == "bench-client"


def test_a_receiver_that_is_down_costs_the_spans_not_the_end_of_the_run() -> None:
    """Twenty batches for a port nobody listens on: each export retries its connection within its timeout (1 s
    here; ~0.6 s each, measured), so an unbounded flush took ~12 s; the flush hands batches over for its budget only
    (0.9 s measured) and counts the rest dropped."""
    with socket.socket() as s:  # a port that refuses connections
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    export = SpanExport(_scenario(url), url, "w-test", timeout_s=1.0)
    ctx = TraceContext(1.0)
    for i in range(640):
        rec = RequestRecord(f"r-{i}", "fast", "chat", sent=1.0, done=2.0, traceparent=ctx.next())
        export.add(rec, 0.0)
    t0 = time.monotonic()
    export.flush(budget_s=0.2)
    elapsed = time.monotonic() - t0
    export.close()
    assert export.spans == 640 and export.dropped == 640
    assert elapsed < 4.0, elapsed


_REPORT: dict[str, Any] = {
    "exit_code": 1,
    "run": {"run_number": 3},
    "variants": [
        {
            "name": "fast",
            "overall": {
                "requests": 120,
                "ok": 118,
                "errors": {"http_5xx": 2},
                "success_rate": 118 / 120,
                "requests_per_s": 12.5,
                "output_tokens_per_s": 600.25,
                "input_tokens_per_s": 1500.0,
                "metrics_ms": {"ttft": {"count": 118, "p50": 31.5, "p99": 175.0, "mean": 40.0, "max": 180.0}},
            },
        }
    ],
}


def test_the_run_summary_arrives_as_gauges_equal_to_the_report() -> None:
    with otlp_receiver() as (url, got):
        assert export_run_metrics(_scenario(url), _REPORT) is True
    assert set(got.paths) == {"/v1/metrics"} and len(got.paths) == 1
    points = {(p["name"], tuple(sorted(p["attributes"].items()))): p for p in got.points}
    fast = (("loadgen.variant", "fast"),)

    def value(name: str, attrs: tuple[tuple[str, str], ...] = fast) -> float:
        p = points[(name, attrs)]
        assert p["kind"] == "gauge"
        return float(p["value"])

    assert value("loadgen.exit_code", ()) == 1
    assert value("loadgen.requests") == 120 and value("loadgen.requests.ok") == 118
    assert value("loadgen.errors", (("error.type", "http_5xx"), *fast)) == 2
    assert value("loadgen.success_rate") == 118 / 120
    assert value("loadgen.requests_per_s") == 12.5 and value("loadgen.output_tokens_per_s") == 600.25
    assert value("loadgen.ttft", (("loadgen.stat", "p99"), *fast)) == 0.175
    assert value("loadgen.ttft", (("loadgen.stat", "p50"), *fast)) == 0.0315
    assert points[("loadgen.ttft", (("loadgen.stat", "p99"), *fast))]["unit"] == "s"
    assert ("loadgen.ttft", (("loadgen.stat", "p90"), *fast)) not in points  # not in the report: not invented
    assert got.points[0]["resource"]["loadgen.run"] == 3


def test_a_refused_export_is_reported_not_raised() -> None:
    with otlp_receiver() as (url, got):
        assert export_run_metrics(_scenario(url + "/nowhere"), _REPORT) is False  # (the receiver answers 404)
    assert got.paths == ["/nowhere/v1/metrics"]
    assert export_run_metrics(parse_scenario(_BARE), _REPORT) is None


_BARE = "variants: [{name: fast, base_url: 'http://127.0.0.1:1', model: m}]\ntracing: {}\n"


def test_without_the_sdk_the_endpoint_is_refused_naming_the_field(monkeypatch: Any) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http", None)  # (import fails: not installed)
    with pytest.raises(ConfigError) as e:
        parse_checked(_BARE.replace("tracing: {}", "tracing: {otlp_endpoint: 'http://127.0.0.1:4318'}"))
    assert "tracing.otlp_endpoint" in str(e.value) and "llm-loadgen[otel]" in str(e.value)
    assert parse_checked(_BARE).tracing is not None  # the header alone needs no SDK
