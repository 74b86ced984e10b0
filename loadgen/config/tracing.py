"""The `tracing:` block of a scenario: W3C trace context on every request, and optional OTLP export.

With `tracing:` given, every request carries a `traceparent` header (version 00, a random 16-byte trace id and
8-byte span id per request; protocol/traceparent.py), and its raw record keeps that header, so a server's spans
(vLLM's, an inference gateway's) join loadgen's records by trace id. Without it, requests carry no trace header.

- `sampled_share`: the share of requests whose header says `sampled` (flags 01; the others 00). The decision is the
  trace id's, as OpenTelemetry's `TraceIdRatioBased` sampler makes it (its low 64 bits under share·2^64), so a
  collector sampling by ratio keeps the same traces.
- `otlp_endpoint`: an OTLP/HTTP receiver's base URL (a collector, Jaeger, Tempo): every sampled request becomes a
  span at `/v1/traces` (the ids it carried, its send and end times, variant, mix, tokens, TTFT, outcome), and the
  run's summary (per variant requests, rates, latency percentiles) gauges at `/v1/metrics` once the report is
  written (live/otlp.py; `pip install 'llm-loadgen[otel]'`). Its headers (a token) come only from the environment,
  OpenTelemetry's `OTEL_EXPORTER_OTLP_HEADERS`: the scenario is copied into reports.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator

__all__ = ["Tracing"]


class Tracing(BaseModel):
    """W3C trace context on every request, and optional OTLP/HTTP export of per-request spans and the run summary."""

    model_config = ConfigDict(extra="forbid")

    sampled_share: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Share of requests whose `traceparent` is flagged sampled (01; the others 00), decided by the "
        "trace id as OpenTelemetry's TraceIdRatioBased sampler does. Only sampled requests are exported as spans.",
    )
    otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP receiver base URL, e.g. http://otel-collector:4318: spans of sampled requests go to "
        "/v1/traces, the run's summary metrics to /v1/metrics (needs `pip install 'llm-loadgen[otel]'`). Headers "
        "such as a token come from the environment only (OTEL_EXPORTER_OTLP_HEADERS). Null: the header only, no "
        "export.",
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value is None:
            return None
        parts = urlsplit(value)
        if "@" in parts.netloc:
            # Not echoed: it holds a password.
            raise ValueError(
                "credentials don't belong in the URL, which reports and logs show: put them in the environment "
                "variable OTEL_EXPORTER_OTLP_HEADERS (e.g. 'authorization=Bearer …')"
            )
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        if parts.query or parts.fragment:
            raise ValueError("expected the receiver's base URL without a query or fragment (a token may ride in one)")
        if parts.path.rstrip("/").endswith(("/v1/traces", "/v1/metrics")):
            raise ValueError("expected the base URL (e.g. http://collector:4318): /v1/traces and /v1/metrics are added")
        return value.rstrip("/")
