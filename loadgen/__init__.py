"""loadgen: distributed load generation for LLM inference deployments.

The packages follow a request's path: `config` (the scenario) → `traffic` (what is sent) → `protocol` (bytes →
chunks → record) → `client` (gevent I/O) → `measure` (records, histograms, aggregates) → `report` (verdict and
reports); `locust_plugin` wires them into Locust and `sim` is the embedded target. Everything but `client` and
`locust_plugin` imports neither Locust nor gevent.

The names below are imported when first asked for (PEP 562): every process imports this package first — the
command line, the simulator, each Locust worker — and most need only a few of its modules (the simulator none of
these; eagerly they cost 0.4 s of every start, numpy and the report's schema validator among them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadgen.lazy_names import lazy_names

if TYPE_CHECKING:
    from loadgen.config import ConfigError, Scenario, load_scenario, parse_scenario
    from loadgen.measure.aggregate import Aggregate
    from loadgen.measure.histogram import LatencyHistogram
    from loadgen.measure.records import RequestRecord
    from loadgen.protocol.accumulator import StreamAccumulator
    from loadgen.protocol.dialects import get_dialect
    from loadgen.report import build_report, render_markdown

_HOME = {
    "Aggregate": "loadgen.measure.aggregate",
    "ConfigError": "loadgen.config",
    "LatencyHistogram": "loadgen.measure.histogram",
    "RequestRecord": "loadgen.measure.records",
    "Scenario": "loadgen.config",
    "StreamAccumulator": "loadgen.protocol.accumulator",
    "build_report": "loadgen.report",
    "get_dialect": "loadgen.protocol.dialects",
    "load_scenario": "loadgen.config",
    "parse_scenario": "loadgen.config",
    "render_markdown": "loadgen.report",
}
__all__ = [
    "Aggregate",
    "ConfigError",
    "LatencyHistogram",
    "RequestRecord",
    "Scenario",
    "StreamAccumulator",
    "build_report",
    "get_dialect",
    "load_scenario",
    "parse_scenario",
    "render_markdown",
]


__getattr__, __dir__ = lazy_names(__name__, _HOME)
