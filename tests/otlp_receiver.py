"""A loopback OTLP/HTTP receiver for the tests: takes what loadgen exports to `/v1/traces` and `/v1/metrics`,
decodes each body with opentelemetry-proto's own messages (as a collector would), and keeps the spans, the metric
points, the request headers it got and every body's bytes (decompressed) as they came."""

from __future__ import annotations

import gzip
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue


def any_value(v: AnyValue) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [any_value(x) for x in v.array_value.values]
    return None if kind is None else getattr(v, kind)


def attributes(kvs: Any) -> dict[str, Any]:
    return {kv.key: any_value(kv.value) for kv in kvs if isinstance(kv, KeyValue)}


@dataclass
class Received:
    spans: list[dict[str, Any]] = field(default_factory=list)
    # One per data point: {"name", "unit", "value", "attributes", "resource"}.
    points: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    bodies: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _handler(received: Received) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            encoding = self.headers.get("Content-Encoding", "")
            if encoding == "gzip":
                body = gzip.decompress(body)
            elif encoding == "deflate":
                body = zlib.decompress(body)
            with received.lock:
                received.paths.append(self.path)
                received.headers.append({k.lower(): v for k, v in self.headers.items()})
                received.bodies.append(body)
                if self.path == "/v1/traces":
                    self._traces(body)
                    reply = ExportTraceServiceResponse().SerializeToString()
                elif self.path == "/v1/metrics":
                    self._metrics(body)
                    reply = ExportMetricsServiceResponse().SerializeToString()
                else:
                    self.send_error(404)
                    return
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def _traces(self, body: bytes) -> None:
            req = ExportTraceServiceRequest.FromString(body)
            for rs in req.resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for s in ss.spans:
                        received.spans.append(
                            {
                                "name": s.name,
                                "trace_id": s.trace_id.hex(),
                                "span_id": s.span_id.hex(),
                                "parent_span_id": s.parent_span_id.hex(),
                                "kind": s.kind,
                                "start_ns": s.start_time_unix_nano,
                                "end_ns": s.end_time_unix_nano,
                                "status_code": s.status.code,
                                "flags": s.flags,
                                "attributes": attributes(s.attributes),
                                "resource": resource,
                                "scope": ss.scope.name,
                            }
                        )

        def _metrics(self, body: bytes) -> None:
            req = ExportMetricsServiceRequest.FromString(body)
            for rm in req.resource_metrics:
                resource = attributes(rm.resource.attributes)
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        for p in getattr(m, kind).data_points:
                            value = p.as_double if p.WhichOneof("value") == "as_double" else p.as_int
                            received.points.append(
                                {
                                    "name": m.name,
                                    "unit": m.unit,
                                    "kind": kind,
                                    "value": value,
                                    "attributes": attributes(p.attributes),
                                    "resource": resource,
                                }
                            )

    return Handler


@contextmanager
def otlp_receiver(port: int = 0) -> Iterator[tuple[str, Received]]:
    """(base URL, what it received) of a receiver on 127.0.0.1 (`port`, else a free one), served from a thread until
    the block ends."""
    received = Received()
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(received))
    thread = threading.Thread(target=server.serve_forever, name="otlp-receiver", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
