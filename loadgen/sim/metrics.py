"""Prometheus collectors of a simulated variant: vLLM's metric names, so dashboards built for vLLM read it unchanged,
plus ``loadgen_sim_faults_total``. Gauges and counters are read from the engine at scrape time: nothing is updated
per token."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
from prometheus_client import CollectorRegistry, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from loadgen.sim.engine import Engine
from loadgen.sim.faults import FaultInjector

__all__ = ["E2E_BUCKETS", "REQUEST_BUCKETS", "TTFT_BUCKETS", "EngineCollector", "FaultCollector", "RequestTimes"]

# vLLM's bucket boundaries.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)
# vLLM's request_latency_buckets: its queue, prefill and decode time histograms.
REQUEST_BUCKETS = (*E2E_BUCKETS, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)


class RequestTimes:
    """vLLM's split of a request's time, from the simulator's own truth: `vllm:request_queue_time_seconds`
    (arrival to the scheduler's admission), `vllm:request_prefill_time_seconds` (admission to the first token's
    write) and `vllm:request_decode_time_seconds` (first token to the last). The same instants as the truth log's
    arrival, scheduled and token records, so a test can hold the scraped split to the log."""

    def __init__(self, registry: CollectorRegistry, model: str) -> None:
        def hist(name: str, doc: str) -> Histogram:
            return Histogram(name, doc, ["model_name"], registry=registry, buckets=REQUEST_BUCKETS).labels(model)

        self.queue = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.")
        self.prefill = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase.")
        self.decode = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase.")

    def first_token(self, arrival: float, scheduled: float | None, t: float) -> None:
        if scheduled is not None:
            self.queue.observe(max(scheduled - arrival, 0.0))
            self.prefill.observe(max(t - scheduled, 0.0))

    def finished(self, first_token: float | None, t: float) -> None:
        if first_token is not None:
            self.decode.observe(max(t - first_token, 0.0))


class EngineCollector(Collector):
    """The engine's queue, KV usage and token counters, with vLLM's names. No `vllm:num_preemptions_total`: the
    engine reserves a sequence's whole KV before admitting it and never preempts (sim/engine.py), so a constant 0
    would only pass for a measurement. Plus `process_start_time_seconds`, as vLLM's /metrics has it from
    prometheus_client's process collector: which process answered (loadgen tells replicas behind one URL apart by
    it)."""

    def __init__(self, engine: Engine, model: str) -> None:
        self._engine, self._model = engine, model
        self._started = psutil.Process().create_time()  # the process's start, Unix seconds, as /proc gives it

    def collect(self) -> Iterator[Metric]:
        e, labels = self._engine, [self._model]
        for name, doc, value in (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", e.num_running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", e.num_waiting),
            # vLLM's current name (gpu_cache_usage_perc is gone since 0.12).
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", e.kv_usage),
        ):
            g = GaugeMetricFamily(name, doc, labels=["model_name"])
            g.add_metric(labels, value)
            yield g
        s = e.stats
        for name, doc, total in (
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", s.prompt_tokens_total),
            ("vllm:generation_tokens", "Number of generation tokens processed.", s.generation_tokens_total),
            ("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", s.prefix_cache_queries),
            ("vllm:prefix_cache_hits", "Prompt tokens served from the prefix cache.", s.prefix_cache_hits),
        ):
            c = CounterMetricFamily(name, doc, labels=["model_name"])
            c.add_metric(labels, total)
            yield c
        if e.profile.spec_k > 1:  # vLLM exports these only with a draft model
            for name, doc, total in (
                ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", s.spec_drafts),
                ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", s.spec_draft_tokens),
                ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", s.spec_accepted_tokens),
            ):
                c = CounterMetricFamily(name, doc, labels=["model_name"])
                c.add_metric(labels, total)
                yield c
        c = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=["model_name", "finished_reason"],
        )
        c.add_metric([self._model, "length"], s.requests_finished)
        c.add_metric([self._model, "abort"], s.requests_aborted)  # as vLLM: the client went before the end
        yield c
        yield GaugeMetricFamily(
            "process_start_time_seconds", "Start time of the process since unix epoch in seconds.", self._started
        )


class FaultCollector(Collector):
    """``loadgen_sim_faults_total{fault=...}``: every fault name is exported, 0 until injected, so rate() works."""

    def __init__(self, faults: FaultInjector) -> None:
        self._faults = faults

    def collect(self) -> Iterator[Metric]:
        c = CounterMetricFamily("loadgen_sim_faults", "Faults injected by the simulator.", labels=["fault"])
        for fault, count in self._faults.counts.items():
            c.add_metric([fault], count)
        yield c
