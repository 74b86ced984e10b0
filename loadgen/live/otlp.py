"""OTLP/HTTP export of a run through the OpenTelemetry SDK (`tracing.otlp_endpoint`; `pip install
'llm-loadgen[otel]'`): one span per sampled request, and the run's summary as gauges once its report is written.

Spans. Every process that sends requests (a worker, or a local run) turns each finished record whose `traceparent`
says sampled into a `loadgen.request` span: kind CLIENT, the trace and span ids the header carried (so a server's
spans are its children), start and end at the request's send and end on the wall clock, and the variant, mix,
tokens, TTFT, E2E and outcome as attributes. It is built by the runtime's recorder (locust_plugin/runtime.py), which
records finished requests when the event loop is idle, never on a request's path (~12 µs a span), and handed to
the SDK's `BatchSpanProcessor`, whose worker (a greenlet under Locust's monkey-patching) exports batches of at most
32 spans every second, or sooner when 32 wait; each run ends with a flush, so a run's spans are out before its
workers report the end (bounded: batches go to the exporter for 2 s at most, each export with its retries gets 3 s;
the master waits 15 s for a worker's final report, which waits for the flush, so a receiver that is down costs the
spans left, logged, never the report). Why the batch processor rather than one export at the end from the records:
spans show up in the tracing backend while the run goes, and nothing is held in memory for the run's length (a long
run at a high rate would hold millions). A batch's protobuf encoding runs on the loop, ~60 µs a span on a 2-core AMD
EPYC (`encode_spans`): batches of 32 hold the loop ~2 ms at a time where 512 (the SDK's default) held it ~35 ms, which
would delay every stream's timestamps. A sampled request costs the worker ~75 µs in all: at more than a few hundred
sampled requests a second per worker, lower `sampled_share`. A full queue (16,384 spans: a receiver that cannot keep
up) drops spans, as the SDK logs.

Metrics. The process that writes the report (the master, or a local run) exports the summary once: per variant the
requests, successes, errors by class, success rate, request and token rates, and each latency's percentiles (in
seconds, attribute `loadgen.stat`), and the run's exit code; gauges, stamped at the export.

Headers (a token) come only from OpenTelemetry's own environment variables (`OTEL_EXPORTER_OTLP_HEADERS`, or the
per-signal `..._TRACES_HEADERS` / `..._METRICS_HEADERS`), which the SDK's exporters read: never from the scenario,
which reports copy. `OTEL_SERVICE_NAME` / `OTEL_RESOURCE_ATTRIBUTES` name the service (default `loadgen`). An export
that fails is logged and never fails the run.
"""

from __future__ import annotations

import logging
import math
import os
import time
from importlib import metadata
from typing import TYPE_CHECKING, Any

from loadgen.measure.fates import fate_name
from loadgen.measure.records import RequestRecord
from loadgen.protocol.traceparent import span_ids, trace_sampled

if TYPE_CHECKING:
    from opentelemetry.sdk.resources import Resource

    from loadgen.config.scenario import Scenario

__all__ = ["SPAN_NAME", "SpanExport", "export_run_metrics", "otel_missing", "span_attributes"]

log = logging.getLogger("loadgen")

SPAN_NAME = "loadgen.request"
_QUEUE = 16_384
_BATCH = 32  # spans per export: ~2 ms of protobuf encoding on the loop (see above)
_DELAY_MS = 1_000
# One export's whole time, retries included: a receiver that is down costs at most this per attempt.
_TIMEOUT_S = 3.0
# The end-of-run flush hands batches to the exporter for this long; later ones are dropped (counted, logged): a
# worker's final report waits for the flush, and its master waits 15 s for that report.
_FLUSH_S = 2.0
_STATS = ("p50", "p90", "p95", "p99", "mean", "max")
_SCOPE = "loadgen"


def otel_missing() -> str | None:
    """Why the OTLP export cannot run here (its packages not installed), or None when it can."""
    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401
        import opentelemetry.sdk  # noqa: F401
    except ImportError as e:
        return f"tracing.otlp_endpoint needs the OpenTelemetry SDK: pip install 'llm-loadgen[otel]' ({e})"
    return None


def _version() -> str:
    try:
        return metadata.version("llm-loadgen")
    except metadata.PackageNotFoundError:
        return "unknown"


def _resource(scenario: Scenario, **more: str | int) -> Resource:
    from opentelemetry.sdk.resources import Resource

    attributes: dict[str, str | int] = {"loadgen.scenario": scenario.name, **more}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = "loadgen"
    return Resource.create(attributes)


def span_attributes(rec: RequestRecord, model: str) -> dict[str, Any]:
    """A request's span attributes: OpenTelemetry's GenAI and HTTP names where they exist, loadgen's others."""
    attrs: dict[str, Any] = {
        "loadgen.request_id": rec.request_id,
        "loadgen.variant": rec.variant,
        "loadgen.mix": rec.mix,
        "loadgen.outcome": "cut_by_stop" if rec.cut_by_stop else rec.error or "ok",
        "loadgen.fate": fate_name(rec),
        "loadgen.warmup": rec.warmup,
        "gen_ai.request.model": model,
        "gen_ai.request.max_tokens": rec.max_tokens,
        "gen_ai.usage.output_tokens": rec.output_token_count,
    }
    optional: dict[str, Any] = {
        "loadgen.bucket": rec.bucket or None,
        "loadgen.class": rec.priority_class or None,
        "loadgen.turn": rec.turn or None,
        "loadgen.cold": rec.cold or None,
        "gen_ai.usage.input_tokens": rec.prompt_tokens,
        "http.response.status_code": rec.status or None,
        "error.type": rec.error,
        "gen_ai.response.finish_reasons": None if rec.finish_reason is None else [rec.finish_reason],
        "loadgen.ttft_s": rec.ttft,
        "loadgen.tpot_s": rec.tpot,
        "loadgen.e2e_s": rec.e2e,
    }
    attrs.update((k, v) for k, v in optional.items() if v is not None)
    return attrs


class _Bounded:
    """The OTLP span exporter, except that a batch handed to it after `until` (monotonic) is dropped at once, and
    that spans it could not export are counted (`dropped`)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.until = math.inf
        self.dropped = 0

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        if time.monotonic() > self.until:
            self.dropped += len(spans)
            return SpanExportResult.FAILURE
        result = self._inner.export(spans)
        if result != SpanExportResult.SUCCESS:
            self.dropped += len(spans)
        return result

    def shutdown(self) -> None:
        self._inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True


class SpanExport:
    """A process's sampled requests to `{endpoint}/v1/traces`, batched (see the module docstring)."""

    def __init__(self, scenario: Scenario, endpoint: str, instance: str, timeout_s: float = _TIMEOUT_S) -> None:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        self.endpoint = endpoint
        self._exporter = _Bounded(OTLPSpanExporter(endpoint=f"{endpoint}/v1/traces", timeout=timeout_s))
        self._processor = BatchSpanProcessor(
            self._exporter,  # type: ignore[arg-type]  # (a SpanExporter by its methods)
            max_queue_size=_QUEUE,
            schedule_delay_millis=_DELAY_MS,
            max_export_batch_size=_BATCH,
        )
        self._logged = 0  # `dropped` as last logged
        self._resource = _resource(scenario, **{"service.instance.id": instance})
        self._scope = InstrumentationScope(_SCOPE, _version())
        self._models = {v.name: v.model for v in scenario.variants}
        self.spans = 0  # handed to the processor (sampled requests)

    def add(self, rec: RequestRecord, to_wall: float) -> None:
        """`rec` as a span when its traceparent says sampled; `to_wall`: this process's monotonic → wall offset."""
        traceparent = rec.traceparent
        if traceparent is None or not trace_sampled(traceparent):
            return
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

        trace_id, span_id = span_ids(traceparent)
        end = rec.done if rec.done is not None else rec.sent
        span = ReadableSpan(
            SPAN_NAME,
            context=SpanContext(trace_id, span_id, is_remote=False, trace_flags=TraceFlags(TraceFlags.SAMPLED)),
            resource=self._resource,
            attributes=span_attributes(rec, self._models.get(rec.variant, "")),
            kind=SpanKind.CLIENT,
            status=Status(StatusCode.ERROR, rec.error) if rec.error is not None else Status(StatusCode.UNSET),
            start_time=round((rec.sent + to_wall) * 1e9),
            end_time=round((end + to_wall) * 1e9),
            instrumentation_scope=self._scope,
        )
        self._processor.on_end(span)
        self.spans += 1

    @property
    def dropped(self) -> int:
        """Spans the receiver did not take (refused, unreachable, or past the end-of-run flush's time)."""
        return self._exporter.dropped

    def flush(self, budget_s: float = _FLUSH_S) -> None:
        """Export the spans handed over so far (the end of a run), handing batches to the exporter for `budget_s` at
        most (one export in progress may take its timeout more): later ones are dropped, and the drops logged."""
        self._exporter.until = time.monotonic() + budget_s
        try:
            self._processor.force_flush()
        finally:
            self._exporter.until = math.inf
        if self.dropped > self._logged:
            log.warning(
                "loadgen: %d spans were not exported to %s/v1/traces (refused, unreachable or too slow; see above)",
                self.dropped - self._logged,
                self.endpoint,
            )
            self._logged = self.dropped

    def close(self) -> None:
        self._processor.shutdown()


def export_run_metrics(scenario: Scenario, report: dict[str, Any]) -> bool | None:
    """The run's summary from its report to `tracing.otlp_endpoint`/v1/metrics, once: whether the receiver took it
    (None: the scenario exports nothing)."""
    endpoint = None if scenario.tracing is None else scenario.tracing.otlp_endpoint
    if endpoint is None:
        return None
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader, MetricExportResult

    # Collected in memory, then exported here: one request, and its result to log (a periodic reader hides it).
    reader = InMemoryMetricReader()
    run = report.get("run", {})
    resource = _resource(scenario, **{"loadgen.run": int(run.get("run_number") or 0)})
    provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    exporter = OTLPMetricExporter(endpoint=f"{endpoint}/v1/metrics", timeout=_TIMEOUT_S)
    try:
        _record_summary(provider.get_meter(_SCOPE, _version()), report)
        data = reader.get_metrics_data()
        ok = data is None or exporter.export(data) == MetricExportResult.SUCCESS
    except Exception:  # noqa: BLE001  (the report is written: an export's failure must not fail the run)
        log.exception("loadgen: building the run's OTLP metrics failed")
        ok = False
    finally:
        provider.shutdown()
        exporter.shutdown()
    if not ok:
        log.warning("loadgen: exporting the run's metrics to %s/v1/metrics failed", endpoint)
    return ok


def _record_summary(meter: Any, report: dict[str, Any]) -> None:
    gauges: dict[str, Any] = {}

    def gauge(name: str, value: float | None, unit: str, description: str, attrs: dict[str, str]) -> None:
        if value is None or (isinstance(value, float) and not math.isfinite(value)):
            return
        g = gauges.get(name)
        if g is None:
            g = gauges[name] = meter.create_gauge(name, unit=unit, description=description)
        g.set(value, attrs)

    gauge("loadgen.exit_code", report.get("exit_code"), "1", "The run's exit code (0 pass, 1 SLO breached, ...).", {})
    for v in report.get("variants", []):
        o, of = v.get("overall") or {}, {"loadgen.variant": v["name"]}
        gauge("loadgen.requests", o.get("requests"), "{request}", "Requests in the window.", of)
        gauge("loadgen.requests.ok", o.get("ok"), "{request}", "Successful requests in the window.", of)
        for kind, n in (o.get("errors") or {}).items():
            gauge("loadgen.errors", n, "{request}", "Failed requests by class.", of | {"error.type": kind})
        gauge("loadgen.success_rate", o.get("success_rate"), "1", "Share of requests that succeeded.", of)
        for key, unit in (
            ("requests_per_s", "{request}/s"),
            ("output_tokens_per_s", "{token}/s"),
            ("input_tokens_per_s", "{token}/s"),
        ):
            gauge(f"loadgen.{key}", o.get(key), unit, f"{key.replace('_', ' ')} over the window.", of)
        for metric, stats in (o.get("metrics_ms") or {}).items():
            for stat in _STATS:
                value = stats.get(stat)
                if value is not None:
                    description = f"{metric} over the window, by statistic (loadgen.stat)."
                    gauge(f"loadgen.{metric}", value / 1e3, "s", description, of | {"loadgen.stat": stat})
