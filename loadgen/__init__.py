"""loadgen: distributed load generation for LLM inference deployments.

The pure core (config, traffic, SSE, dialects, records, histograms, aggregate, reports) is importable without
Locust or gevent; the Locust glue lives in `loadgen.glue` and the simulator in `loadgen.sim`.
"""

from .aggregate import Aggregate
from .config import Scenario, load_scenario, parse_scenario
from .config_errors import ConfigError
from .dialects import get_dialect
from .histogram import LatencyHistogram
from .records import RequestRecord
from .report import build_report, render_markdown
from .stream import StreamAccumulator

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
