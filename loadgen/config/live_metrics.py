"""The `metrics:` block of a scenario: what the master's Prometheus exporter and its server-metrics scraper do.

- `buckets_s`: the upper bounds (seconds) of the exported latency histograms' buckets. Prometheus histograms are
  coarse; the exact HDR percentiles are exported as gauges beside them.
- `server_scrape_interval`: how often the master reads each variant's own `/metrics` (queue, KV-cache use,
  preemptions, prefix-cache hits, speculative acceptance); 0 turns the scraping off.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loadgen.config.types import Duration

__all__ = ["DEFAULT_BUCKETS_S", "LiveMetrics"]

# Spans a fast ITL (1 ms) to a long E2E (1 min): one layout for all four latencies, so a dashboard reads them alike.
DEFAULT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


class LiveMetrics(BaseModel):
    """Live metrics of a run: the exporter's histogram buckets and the servers' own metrics scraping."""

    model_config = ConfigDict(extra="forbid")

    buckets_s: list[float] = Field(
        default_factory=lambda: list(DEFAULT_BUCKETS_S),
        description="Upper bounds in seconds of the exported latency histograms' buckets (ascending, > 0); +Inf is "
        "added. Coarse by nature: the exact percentiles are the loadgen_*_quantile_seconds gauges.",
    )
    server_scrape_interval: Duration = Field(
        default=2.0,
        description="How often the master scrapes each variant's own /metrics (one scraper per variant); 0: never.",
    )

    @field_validator("buckets_s")
    @classmethod
    def _ascending(cls, value: list[float]) -> list[float]:
        if not value:
            raise ValueError("at least one bucket bound")
        if any(b <= 0 or b != b or b == float("inf") for b in value):
            raise ValueError("bucket bounds must be finite and > 0 (+Inf is added)")
        if any(b >= c for b, c in zip(value, value[1:], strict=False)):
            raise ValueError("bucket bounds must be strictly ascending")
        return value
