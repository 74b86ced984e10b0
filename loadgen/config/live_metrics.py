"""The `metrics:` block of a scenario: what the master's Prometheus exporter and its server-metrics scraper do.

- `buckets_s`: the upper bounds (seconds) of the exported latency histograms' buckets. Prometheus histograms are
  coarse; the exact HDR percentiles are exported as gauges beside them.
- `server_scrape_interval`: how often the master reads each variant's own `/metrics` (queue, KV-cache use,
  preemptions, prefix-cache hits, speculative acceptance); 0 turns the scraping off.
- `prometheus`: a cluster Prometheus and PromQL queries (e.g. DCGM GPU utilisation and memory) the master evaluates
  over the run window into the report (live/cluster_metrics.py).
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from loadgen.config.credentials import ENV_NAME
from loadgen.config.types import Duration

__all__ = ["DEFAULT_BUCKETS_S", "BasicAuthEnv", "ClusterPrometheus", "LiveMetrics"]

_QUERY_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")
_ENV_NAME = re.compile(ENV_NAME)

# Spans a fast ITL (1 ms) to a long E2E (1 min): one layout for all four latencies, so a dashboard reads them alike.
DEFAULT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


class BasicAuthEnv(BaseModel):
    """HTTP basic auth for a Prometheus, both parts from the environment."""

    model_config = ConfigDict(extra="forbid")

    username: str = Field(description="NAME of the environment variable holding the user name.")
    password: str = Field(description="NAME of the environment variable holding the password (never the password).")

    @field_validator("username", "password")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not _ENV_NAME.match(value):
            # Not echoed: this is where a password gets pasted by mistake.
            raise ValueError("expected the NAME of an environment variable (letters, digits, '_'), not its value")
        return value


class ClusterPrometheus(BaseModel):
    """A cluster's Prometheus, read by the master over the run window (`/api/v1/query_range`): what the GPUs and the
    nodes did beside the client latencies (DCGM utilisation, memory, power; node CPU)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        description="The Prometheus (or Thanos / Mimir querier) base URL, e.g. http://prometheus.monitoring:9090; "
        "/api/v1/… is appended.",
    )
    queries: dict[str, str] = Field(
        default_factory=dict,
        description="Name → PromQL, e.g. {gpu_util: 'avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)'}: each evaluated "
        "over the run window, each result series into the report. Checked against the Prometheus before load. "
        "May be empty when only the variants' `power` / `gpu_memory` queries read it.",
    )
    step: Duration = Field(
        default=5.0,
        description="Resolution of the range queries; raised for long runs so a series keeps at most 1,000 points.",
    )
    timeout: Duration = Field(default=10.0, description="Per request to the Prometheus.")
    bearer_token_env: str | None = Field(
        default=None,
        description="NAME of an environment variable holding a bearer token for the Prometheus (never the token).",
    )
    basic_auth_env: BasicAuthEnv | None = Field(
        default=None,
        description="HTTP basic auth for the Prometheus: `{username: ENV_NAME, password: ENV_NAME}`, both from the "
        "environment. Credentials never go in `url`.",
    )

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        parts = urlsplit(value)
        if "@" in parts.netloc:
            # Not echoed: it holds a password.
            raise ValueError(
                "credentials don't belong in the URL, which reports and logs show: give bearer_token_env or "
                "basic_auth_env, the NAMES of environment variables holding them"
            )
        if not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        if parts.query or parts.fragment:
            raise ValueError("expected the Prometheus base URL without a query or fragment (a token may ride in one)")
        return value.rstrip("/")

    @field_validator("queries")
    @classmethod
    def _named(cls, value: dict[str, str]) -> dict[str, str]:
        for name, query in value.items():
            if not _QUERY_NAME.match(name):
                raise ValueError(f"query name {name!r}: letters, digits and _ (a Prometheus-style name)")
            if not isinstance(query, str) or not query.strip():
                raise ValueError(f"query {name!r} is empty: expected a PromQL expression")
        return value

    @field_validator("step", "timeout")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be above zero")
        return value

    @field_validator("bearer_token_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.match(value):
            # Not echoed: this is where a token gets pasted by mistake.
            raise ValueError("expected the NAME of an environment variable (letters, digits, '_'), not its value")
        return value

    @model_validator(mode="after")
    def _one_auth(self) -> ClusterPrometheus:
        if self.bearer_token_env and self.basic_auth_env:
            raise ValueError("give bearer_token_env or basic_auth_env, not both")
        return self

    def secret_env_names(self) -> list[str]:
        """The environment variables the Prometheus credentials come from."""
        if self.basic_auth_env is not None:
            return [self.basic_auth_env.username, self.basic_auth_env.password]
        return [self.bearer_token_env] if self.bearer_token_env else []


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
    prometheus: ClusterPrometheus | None = Field(
        default=None,
        description="A cluster Prometheus whose PromQL queries (e.g. DCGM GPU metrics) the report holds over the run.",
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
