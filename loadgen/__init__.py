"""loadgen: distributed load generation for LLM inference deployments.

The packages follow a request's path: `config` (the scenario) → `traffic` (what is sent) → `protocol` (bytes →
chunks → record) → `client` (gevent I/O) → `measure` (records, histograms, aggregates) → `report` (verdict and
reports); `locust_plugin` wires them into Locust and `sim` is the embedded target. Everything but `client` and
`locust_plugin` imports neither Locust nor gevent.
"""

from loadgen.config import ConfigError, Scenario, load_scenario, parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.records import RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect
from loadgen.report import build_report, render_markdown

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
