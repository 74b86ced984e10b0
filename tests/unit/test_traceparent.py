"""The `traceparent` header loadgen sends (protocol/traceparent.py) and the `tracing:` block (config/tracing.py).

Ground truth for the sampled flag: OpenTelemetry's own `TraceIdRatioBased` sampler, which must take the same
decision for every trace id (a collector sampling by ratio keeps the traces loadgen flagged)."""

from __future__ import annotations

import math
import random
import re

import pytest
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from loadgen.measure.records import RequestRecord
from loadgen.protocol.traceparent import TRACEPARENT, TraceContext, span_ids, trace_sampled
from loadgen.report.csv_records import COLUMNS, render_csv

# W3C trace-context's grammar for version 00, written out independently of the module's own regex.
_W3C = r"^00-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}-0[01]$"


def test_every_header_is_w3c_version_00_with_fresh_nonzero_ids() -> None:
    ctx = TraceContext(0.5)
    values = [ctx.next() for _ in range(5000)]
    for v in values:
        assert TRACEPARENT.match(v) and re.match(_W3C, v), v
    assert len({v[3:35] for v in values}) == len(values)  # a trace id per request
    assert len({v[36:52] for v in values}) == len(values)


def test_all_zero_ids_are_drawn_again() -> None:
    draws = iter([bytes(24), bytes(16) + b"\x01" * 8, b"\x01" * 16 + bytes(8), b"\x02" * 24])
    tp = TraceContext(1.0, lambda n: next(draws)).next()
    assert tp == "00-" + "02" * 16 + "-" + "02" * 8 + "-01"


@pytest.mark.parametrize("share", [0.0, 0.01, 0.25, 0.5, 0.9, 1.0])
def test_sampled_share_is_the_ratio_samplers_decision_in_the_right_proportion(share: float) -> None:
    ctx = TraceContext(share, random.Random(f"tp-{share}").randbytes)
    otel = TraceIdRatioBased(share)
    n = 20_000
    sampled = 0
    for _ in range(n):
        tp = ctx.next()
        trace_id, _span = span_ids(tp)
        assert tp.endswith(("-00", "-01"))
        flagged = trace_sampled(tp)
        assert flagged == otel.should_sample(None, trace_id, "x").decision.is_sampled(), tp
        sampled += flagged
    if share in (0.0, 1.0):
        assert sampled == n * share
    else:
        sigma = math.sqrt(n * share * (1 - share))
        assert abs(sampled - n * share) < 5 * sigma, (sampled, n * share)


def test_span_ids_read_the_header() -> None:
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    assert span_ids(tp) == (0x0AF7651916CD43DD8448EB211C80319C, 0xB7AD6B7169203331)
    assert trace_sampled(tp) and not trace_sampled(tp[:-1] + "0")


def test_raw_rows_carry_the_header_and_its_trace_id() -> None:
    tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    rec = RequestRecord("r-1", "v", "chat", traceparent=tp)
    row = rec.to_json()
    assert row["traceparent"] == tp and row["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    assert RequestRecord.from_json(row).traceparent == tp
    csv_row = dict(zip(COLUMNS, render_csv([row]).splitlines()[1].split(","), strict=True))
    assert csv_row["trace_id"] == "0af7651916cd43dd8448eb211c80319c"
    bare = RequestRecord("r-2", "v", "chat").to_json()
    assert bare["traceparent"] is None and bare["trace_id"] is None


_BASE = "variants: [{name: a, base_url: 'http://127.0.0.1:1', model: m}]\n"


def test_tracing_is_off_by_default_and_samples_everything_when_given() -> None:
    assert parse_scenario(_BASE).tracing is None
    tracing = parse_scenario(_BASE + "tracing: {}\n").tracing
    assert tracing is not None and tracing.sampled_share == 1.0 and tracing.otlp_endpoint is None
    given = parse_scenario(_BASE + "tracing: {sampled_share: 0.1, otlp_endpoint: 'http://collector:4318/'}\n")
    assert given.tracing is not None and given.tracing.otlp_endpoint == "http://collector:4318"


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("{sampled_share: 1.5}", "less than or equal to 1"),
        ("{sampled_share: -0.1}", "at least 0"),
        ("{otlp_endpoint: 'http://user:hunter2@collector:4318'}", "OTEL_EXPORTER_OTLP_HEADERS"),
        ("{otlp_endpoint: 'http://collector:4318?token=abc'}", "without a query"),
        ("{otlp_endpoint: 'http://collector:4318/v1/traces'}", "base URL"),
        ("{otlp_endpoint: 'collector:4318'}", "http://"),
        ("{sampled: 0.5}", "sampled"),
    ],
)
def test_tracing_refuses_what_it_cannot_use(value: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_scenario(_BASE + f"tracing: {value}\n")
    text = str(e.value)
    assert "tracing" in text and words in text, text
    assert "hunter2" not in text
