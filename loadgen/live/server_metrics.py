"""The inference servers' own /metrics, normalised: what a server was doing (queue, batch, KV-cache use, preemptions,
prefix-cache hits, speculative acceptance) beside the client latencies measured at the same moment.

Pure: `parse_metrics` turns one exposition (parsed with `prometheus_client.parser`) into normalised values, and a
`ServerTimeline` keeps one variant's samples and reports them with counters turned into rates over each interval.
The scraping itself (one greenlet per variant on the master, never one per worker: llama.cpp's throughput gauges
reset on every read) lives in locust_plugin/server_scrape.py.

Names as the servers export them today: vLLM V1 (`vllm:kv_cache_usage_perc`; `gpu_cache_usage_perc` before 0.12 is
still read), SGLang, TGI, llama.cpp's `--metrics`. Several label sets of one name (several models or engines behind
one endpoint) add up, except ratios, which take their maximum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["COUNTERS", "SOURCES", "ServerTimeline", "metrics_url", "parse_metrics"]

# Sample name → (normalised key, source). Gauges: running / waiting requests, KV-cache use as a ratio (0–1).
# Counters (cumulative; become per-interval rates): preemptions, prompt / generated tokens, prefix-cache queries /
# hits (tokens), speculative draft / accepted tokens. SGLang exports its hit and acceptance rates as gauges.
SOURCES: dict[str, tuple[str, str]] = {
    "vllm:num_requests_running": ("running", "vllm"),
    "vllm:num_requests_waiting": ("waiting", "vllm"),
    "vllm:kv_cache_usage_perc": ("kv_usage", "vllm"),
    "vllm:gpu_cache_usage_perc": ("kv_usage", "vllm"),
    "vllm:num_preemptions_total": ("preemptions", "vllm"),
    "vllm:prompt_tokens_total": ("prompt_tokens", "vllm"),
    "vllm:generation_tokens_total": ("generation_tokens", "vllm"),
    "vllm:prefix_cache_queries_total": ("prefix_queries", "vllm"),
    "vllm:prefix_cache_hits_total": ("prefix_hits", "vllm"),
    "vllm:spec_decode_num_draft_tokens_total": ("spec_draft", "vllm"),
    "vllm:spec_decode_num_accepted_tokens_total": ("spec_accepted", "vllm"),
    "sglang:num_running_reqs": ("running", "sglang"),
    "sglang:num_queue_reqs": ("waiting", "sglang"),
    "sglang:token_usage": ("kv_usage", "sglang"),
    "sglang:cache_hit_rate": ("prefix_hit_rate_gauge", "sglang"),
    "sglang:spec_accept_rate": ("spec_acceptance_gauge", "sglang"),
    "sglang:prompt_tokens_total": ("prompt_tokens", "sglang"),
    "sglang:generation_tokens_total": ("generation_tokens", "sglang"),
    "tgi_queue_size": ("waiting", "tgi"),
    "tgi_batch_current_size": ("running", "tgi"),
    "llamacpp:requests_processing": ("running", "llamacpp"),
    "llamacpp:requests_deferred": ("waiting", "llamacpp"),
    "llamacpp:kv_cache_usage_ratio": ("kv_usage", "llamacpp"),
    "llamacpp:prompt_tokens_total": ("prompt_tokens", "llamacpp"),
    "llamacpp:tokens_predicted_total": ("generation_tokens", "llamacpp"),
}
COUNTERS = frozenset(
    {
        "preemptions",
        "prompt_tokens",
        "generation_tokens",
        "prefix_queries",
        "prefix_hits",
        "spec_draft",
        "spec_accepted",
    }
)
_RATIOS = frozenset({"kv_usage", "prefix_hit_rate_gauge", "spec_acceptance_gauge"})
_GAUGES = ("running", "waiting", "kv_usage")


def parse_metrics(text: str) -> tuple[str | None, dict[str, float]]:
    """(the server kind the names belong to — vllm / sglang / tgi / llamacpp — or None, normalised values)."""
    values: dict[str, float] = {}
    kinds: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            hit = SOURCES.get(s.name)
            if hit is None or not math.isfinite(s.value):
                continue
            key, kind = hit
            kinds[kind] = kinds.get(kind, 0) + 1
            if key in _RATIOS:
                values[key] = max(values.get(key, 0.0), float(s.value))
            else:
                values[key] = values.get(key, 0.0) + float(s.value)
    return (max(kinds, key=lambda k: kinds[k]) if kinds else None), values


def metrics_url(base_url: str) -> str:
    """A variant's /metrics: at its server's root (a trailing /v1 of the base URL is the API's, not the server's)."""
    u = urlsplit(base_url)
    path = u.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return urlunsplit(
        (u.scheme, u.hostname + (f":{u.port}" if u.port else "") if u.hostname else u.netloc, path + "/metrics", "", "")
    )


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def _ratio(num: float, den: float) -> float | None:
    return round(num / den, 4) if den > 0 else None


@dataclass
class ServerTimeline:
    """One variant's scrapes: wall-clock times (Unix s, the axis of the report's `variants[].timeline`) and values."""

    url: str
    interval_s: float
    kind: str | None = None
    times: list[float] = field(default_factory=list)
    samples: list[dict[str, float]] = field(default_factory=list)
    failures: int = 0
    note: str | None = None

    def add(self, t_unix: float, kind: str | None, values: dict[str, float]) -> None:
        self.kind = self.kind or kind
        self.times.append(t_unix)
        self.samples.append(values)

    def _deltas(self, key: str) -> list[float | None]:
        """Per interval (from the previous sample): the counter's increase, None where it is absent or was reset."""
        out: list[float | None] = [None]
        for prev, cur in zip(self.samples, self.samples[1:], strict=False):
            a, b = prev.get(key), cur.get(key)
            out.append(b - a if a is not None and b is not None and b >= a else None)
        return out

    def report(self) -> dict[str, Any]:
        """The report's `variants[].server_metrics`: per-sample series (counters as rates per second over the
        interval that ended there) and a summary over the run."""
        dts = [None] + [b - a for a, b in zip(self.times, self.times[1:], strict=False)]
        series: dict[str, list[float | None]] = {}
        for key in _GAUGES:
            if any(key in s for s in self.samples):
                series[key] = [s.get(key) for s in self.samples]
        for key, name in (
            ("preemptions", "preemptions_per_s"),
            ("prompt_tokens", "prompt_tokens_per_s"),
            ("generation_tokens", "generation_tokens_per_s"),
        ):
            if any(key in s for s in self.samples):
                d = self._deltas(key)
                series[name] = [
                    round(x / dt, 3) if x is not None and dt else None for x, dt in zip(d, dts, strict=True)
                ]
        for num, den, gauge, name in (
            ("prefix_hits", "prefix_queries", "prefix_hit_rate_gauge", "prefix_cache_hit_rate"),
            ("spec_accepted", "spec_draft", "spec_acceptance_gauge", "spec_acceptance"),
        ):
            if any(num in s for s in self.samples):
                series[name] = [
                    _ratio(a, b) if a is not None and b is not None else None
                    for a, b in zip(self._deltas(num), self._deltas(den), strict=True)
                ]
            elif any(gauge in s for s in self.samples):
                series[name] = [s.get(gauge) for s in self.samples]
        return {
            "source": self.kind,
            "url": self.url,
            "interval_s": self.interval_s,
            "samples": len(self.times),
            "failures": self.failures,
            "note": self.note,
            "t_unix_s": [round(t, 3) for t in self.times],
            "series": series,
            "summary": self._summary(series),
        }

    def _summary(self, series: dict[str, list[float | None]]) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for key in _GAUGES:
            xs = [x for x in series.get(key, []) if x is not None]
            if xs:
                out[f"{key}_mean"] = _mean(xs)
                out[f"{key}_max"] = round(max(xs), 4)
        first, last = (self.samples[0], self.samples[-1]) if self.samples else ({}, {})

        def grew(key: str) -> float | None:
            d = [x for x in self._deltas(key) if x is not None]
            return sum(d) if key in last and key in first else None

        pre = grew("preemptions")
        if pre is not None:
            out["preemptions"] = pre
        for num, den, name in (
            ("prefix_hits", "prefix_queries", "prefix_cache_hit_rate"),
            ("spec_accepted", "spec_draft", "spec_acceptance"),
        ):
            a, b = grew(num), grew(den)
            if a is not None and b is not None:
                out[name] = _ratio(a, b)
            else:
                xs = [x for x in series.get(name, []) if x is not None]
                if xs:
                    out[name] = _mean(xs)
        return out
