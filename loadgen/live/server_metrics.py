"""The inference servers' own /metrics, normalised: what a server was doing (queue, batch, KV-cache use, preemptions,
prefix-cache hits, speculative acceptance) beside the client latencies measured at the same moment.

Pure: `parse_metrics` turns one exposition (parsed with `prometheus_client.parser`) into normalised values, and a
`ServerTimeline` keeps one variant's scrapes and reports them with counters turned into rates over each interval.
A variant is scraped either through its one URL (the Service's, or a server's) or pod by pod (locust_plugin,
with the pods from loadgen/k8s/pod_metrics.py). Pod by pod, counters are differenced per pod (a pod that restarts
loses only its own interval) and summed; the queue and the batch are summed; KV-cache use is per pod, reported as
the mean and the max across pods. Through one URL with several replicas behind it, each scrape reads a random pod,
so differences mix pods: when successive scrapes come from different processes (`process_start_time_seconds`, which
vLLM and the simulator export; else counters that go back more than once) the report says so and shows no numbers.

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
    "vllm:spec_decode_num_drafts_total": ("spec_drafts", "vllm"),
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
# The servers' per-request time histograms, by part of a request's time: only their _sum and _count are kept (the
# exact mean over any interval; vLLM's queue / prefill / decode buckets begin at 0.3 s, too coarse for a sound p50
# of sub-second times). report/server_split.py splits the client's TTFT with them.
REQUEST_TIMES: dict[str, tuple[str, str]] = {
    "vllm:request_queue_time_seconds": ("queue", "vllm"),
    "vllm:request_prefill_time_seconds": ("prefill", "vllm"),
    "vllm:request_decode_time_seconds": ("decode", "vllm"),
    "vllm:time_to_first_token_seconds": ("ttft", "vllm"),
    "sglang:time_to_first_token_seconds": ("ttft", "sglang"),
    "tgi_request_queue_duration": ("queue", "tgi"),
}
_SUM_COUNT = ("sum", "count")
SOURCES.update(
    {f"{name}_{x}": (f"{part}_time_{x}", kind) for name, (part, kind) in REQUEST_TIMES.items() for x in _SUM_COUNT}
)
COUNTERS = frozenset(
    {
        "preemptions",
        "prompt_tokens",
        "generation_tokens",
        "prefix_queries",
        "prefix_hits",
        "spec_draft",
        "spec_accepted",
        "spec_drafts",
        *(f"{part}_time_{x}" for part, _ in REQUEST_TIMES.values() for x in ("sum", "count")),
    }
)
_RATIOS = frozenset({"kv_usage", "prefix_hit_rate_gauge", "spec_acceptance_gauge"})
_GAUGES = ("running", "waiting", "kv_usage")
_SUMMED = ("running", "waiting")  # across pods; kv_usage is per pod: the mean and the max across pods
# prometheus_client's process collector (vLLM's /metrics has it): which process answered a scrape.
_IDENTITY = "process_start_time_seconds"


def parse_metrics(text: str) -> tuple[str | None, dict[str, float]]:
    """(the server kind the names belong to — vllm / sglang / tgi / llamacpp — or None, normalised values). A
    process start time, when exported, is kept as ``process_start`` (the identity of the process that answered)."""
    values: dict[str, float] = {}
    kinds: dict[str, int] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == _IDENTITY and math.isfinite(s.value):
                values["process_start"] = float(s.value)
                continue
            hit = SOURCES.get(s.name)
            if hit is None or not math.isfinite(s.value):
                continue
            key, kind = hit
            kinds[kind] = kinds.get(kind, 0) + 1
            if key in _RATIOS:
                values[key] = max(values.get(key, 0.0), float(s.value))
            else:
                values[key] = values.get(key, 0.0) + float(s.value)
    if not kinds:
        values.pop("process_start", None)
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


Values = dict[str, float]


@dataclass
class ServerTimeline:
    """One variant's scrapes: wall-clock times (Unix s, the axis of the report's `variants[].timeline`) and, per
    scrape, each target's values (None: that target failed the scrape). A target is the variant's one URL
    (`scope` "service") or one pod's /metrics (`scope` "pods")."""

    url: str
    interval_s: float
    kind: str | None = None
    times: list[float] = field(default_factory=list)
    rounds: list[dict[str, Values | None]] = field(default_factory=list)
    failures: int = 0
    note: str | None = None
    scope: str = "service"

    @property
    def samples(self) -> list[dict[str, Values | None]]:
        """The scrapes so far (one per round, whatever the number of pods)."""
        return self.rounds

    def add(self, t_unix: float, kind: str | None, values: Values) -> None:
        """One scrape of the variant's one URL."""
        self.add_round(t_unix, kind, {self.url: values})

    def add_round(self, t_unix: float, kind: str | None, per_target: dict[str, Values | None]) -> None:
        """One scrape of every target (pods: the ones listed at the time)."""
        self.kind = self.kind or kind
        self.times.append(t_unix)
        self.rounds.append(dict(per_target))

    def targets(self) -> list[str]:
        return list(dict.fromkeys(t for r in self.rounds for t in r))

    def _column(self, target: str) -> list[Values | None]:
        return [r.get(target) for r in self.rounds]

    def _target_deltas(self, column: list[Values | None], key: str) -> list[tuple[float, float] | None]:
        """Per scrape, one target's (increase of ``key``, seconds) since its previous good scrape; None where it has
        no previous one, the key is absent, or the process restarted (its counter reset, or a new start time)."""
        out: list[tuple[float, float] | None] = []
        prev: tuple[float, Values] | None = None
        for t, cur in zip(self.times, column, strict=True):
            if cur is None:
                out.append(None)
                continue
            d = None
            if prev is not None:
                t0, before = prev
                a, b = before.get(key), cur.get(key)
                same = before.get("process_start") == cur.get("process_start")
                if a is not None and b is not None and b >= a and same and t > t0:
                    d = (b - a, t - t0)
            out.append(d)
            prev = (t, cur)
        return out

    def _deltas(self, key: str) -> list[list[tuple[float, float] | None]]:
        return [self._target_deltas(self._column(target), key) for target in self.targets()]

    def _rate(self, key: str) -> list[float | None]:
        """Per scrape: the sum over targets of each one's increase per second (None: no target has one)."""
        out: list[float | None] = []
        per_target = self._deltas(key)
        for i in range(len(self.times)):
            parts = [d[0] / d[1] for col in per_target if (d := col[i]) is not None]
            out.append(round(sum(parts), 3) if parts else None)
        return out

    def _interval_ratio(self, num: str, den: str) -> list[float | None]:
        nums, dens = self._deltas(num), self._deltas(den)
        out: list[float | None] = []
        for i in range(len(self.times)):
            pairs = [(a[0], b[0]) for ca, cb in zip(nums, dens, strict=True) if (a := ca[i]) and (b := cb[i])]
            out.append(_ratio(sum(a for a, _ in pairs), sum(b for _, b in pairs)) if pairs else None)
        return out

    def _total(self, key: str) -> float | None:
        """The run's increase of a counter, summed over targets (None: no target exports it)."""
        if not any(key in v for r in self.rounds for v in r.values() if v):
            return None
        return sum(d[0] for col in self._deltas(key) for d in col if d is not None)

    def _gauge(self, key: str, how: str) -> list[float | None]:
        """Per scrape, across targets: "sum" (None when a target failed or lacks it), "mean" or "max"."""
        out: list[float | None] = []
        for r in self.rounds:
            xs = [v[key] for v in r.values() if v is not None and key in v]
            if how == "sum":
                whole = xs and len(xs) == len(r)
                out.append(round(sum(xs), 4) if whole else None)
            elif how == "mean":
                out.append(_mean(xs))
            else:
                out.append(round(max(xs), 4) if xs else None)
        return out

    def several_replicas(self) -> bool:
        """Through one URL: whether successive scrapes were answered by different processes. A process start time
        that comes back after another (A, B, A) is several replicas (a restart is A, B); without one, counters that
        go back more than once (a restart makes them go back once)."""
        if self.scope != "service":
            return False
        column = [v for r in self.rounds for v in r.values() if v is not None]
        starts = [v["process_start"] for v in column if "process_start" in v]
        runs = [s for i, s in enumerate(starts) if i == 0 or s != starts[i - 1]]
        if len(runs) != len(set(runs)):
            return True
        if starts:
            return False
        for key in ("generation_tokens", "prompt_tokens"):
            xs = [v[key] for v in column if key in v]
            if sum(b < a for a, b in zip(xs, xs[1:], strict=False)) >= 2:
                return True
        return False

    def request_times(self, since_unix: float | None = None) -> dict[str, dict[str, float]]:
        """Per part of a request's time the server exports (`REQUEST_TIMES`): the requests it finished and their
        mean in ms, over the scrapes from the last one at or before `since_unix` (the measured window's start; None:
        every scrape) to the last, each target differenced on its own and summed."""
        first = 0
        if since_unix is not None:
            first = max((i for i, t in enumerate(self.times) if t <= since_unix), default=0)
        tail = ServerTimeline(self.url, self.interval_s, self.kind, self.times[first:], self.rounds[first:])
        out: dict[str, dict[str, float]] = {}
        for part in dict.fromkeys(p for p, _ in REQUEST_TIMES.values()):
            total, count = tail._total(f"{part}_time_sum"), tail._total(f"{part}_time_count")
            if total is not None and count:
                out[part] = {"count": int(count), "mean_ms": round(total / count * 1000, 3)}
        return out

    def report(self, since_unix: float | None = None) -> dict[str, Any]:
        """The report's `variants[].server_metrics`: per-scrape series (counters as rates per second over the
        interval that ended there, summed over pods) and a summary over the run; per pod, its gauges; the mean
        request times since `since_unix` (`request_times`)."""
        several = self.several_replicas()
        note = self.note
        if several and note is None:
            note = (
                f"several replicas answer behind {self.url} (successive scrapes came from different processes): "
                "each scrape reads one of them, so its counters and gauges would mix pods and are not shown; "
                "name the variant by a Kubernetes selector, or run where the master may list the Service's "
                "EndpointSlices, to scrape each pod"
            )
        series = {} if several else self._series()
        return {
            "source": self.kind,
            "url": self.url,
            "interval_s": self.interval_s,
            "samples": len(self.times),
            "failures": self.failures,
            "note": note,
            "scope": self.scope,
            "several_replicas": several,
            "t_unix_s": [round(t, 3) for t in self.times],
            "series": series,
            "summary": {} if several else self._summary(series),
            "pods": self._pods() if self.scope == "pods" else [],
            **({} if several else {"request_times": self.request_times(since_unix)}),
        }

    def _series(self) -> dict[str, list[float | None]]:
        series: dict[str, list[float | None]] = {}
        present = {k for r in self.rounds for v in r.values() if v for k in v}
        for key in _SUMMED:
            if key in present:
                series[key] = self._gauge(key, "sum")
        if "kv_usage" in present:
            series["kv_usage"] = self._gauge("kv_usage", "mean")
            if len(self.targets()) > 1:
                series["kv_usage_max"] = self._gauge("kv_usage", "max")
        for key, name in (
            ("preemptions", "preemptions_per_s"),
            ("prompt_tokens", "prompt_tokens_per_s"),
            ("generation_tokens", "generation_tokens_per_s"),
        ):
            if key in present:
                series[name] = self._rate(key)
        for num, den, gauge, name in (
            ("prefix_hits", "prefix_queries", "prefix_hit_rate_gauge", "prefix_cache_hit_rate"),
            ("spec_accepted", "spec_draft", "spec_acceptance_gauge", "spec_acceptance"),
        ):
            if num in present:
                series[name] = self._interval_ratio(num, den)
            elif gauge in present:
                series[name] = self._gauge(gauge, "mean")
        return series

    def _summary(self, series: dict[str, list[float | None]]) -> dict[str, float | None]:
        out: dict[str, float | None] = {}
        for key in _GAUGES:
            xs = [x for x in series.get(key, []) if x is not None]
            if xs:
                out[f"{key}_mean"] = _mean(xs)
                out[f"{key}_max"] = round(max(xs), 4)
        top = [x for x in series.get("kv_usage_max", []) if x is not None]
        if top:
            out["kv_usage_max"] = round(max(top), 4)  # the fullest pod's
        for key in ("preemptions", "prompt_tokens", "generation_tokens"):
            total = self._total(key)  # over the run, summed over pods
            if total is not None:
                out[key] = total
        for num, den, name in (
            ("prefix_hits", "prefix_queries", "prefix_cache_hit_rate"),
            ("spec_accepted", "spec_draft", "spec_acceptance"),
        ):
            a, b = self._total(num), self._total(den)
            if a is not None and b is not None:
                out[name] = _ratio(a, b)
            else:
                xs = [x for x in series.get(name, []) if x is not None]
                if xs:
                    out[name] = _mean(xs)
        accepted, drafts = self._total("spec_accepted"), self._total("spec_drafts")
        if accepted is not None and drafts:  # vLLM's mean acceptance length: tokens per sequence and step
            out["spec_tokens_per_step"] = round(1 + accepted / drafts, 4)
        return out

    def _pods(self) -> list[dict[str, Any]]:
        """Per pod: its scrapes, failures, restarts seen, and its own gauges (series on `t_unix_s`, mean / max)."""
        out = []
        for target in self.targets():
            column = self._column(target)
            seen = [v for v in column if v is not None]
            starts = [v["process_start"] for v in seen if "process_start" in v]
            series = {k: [v.get(k) if v else None for v in column] for k in _GAUGES if any(k in v for v in seen)}
            summary: dict[str, float | None] = {}
            for key, xs_all in series.items():
                xs = [x for x in xs_all if x is not None]
                summary[f"{key}_mean"], summary[f"{key}_max"] = _mean(xs), round(max(xs), 4) if xs else None
            gen = self._total_of(column, "generation_tokens")
            if gen is not None:
                summary["generation_tokens"] = gen
            out.append(
                {
                    "url": target,
                    "samples": len(seen),
                    "failures": sum(1 for r in self.rounds if target in r and r[target] is None),
                    "restarts": sum(1 for a, b in zip(starts, starts[1:], strict=False) if a != b),
                    "series": series,
                    "summary": summary,
                }
            )
        return out

    def _total_of(self, column: list[Values | None], key: str) -> float | None:
        if not any(v and key in v for v in column):
            return None
        return sum(d[0] for d in self._target_deltas(column, key) if d is not None)
