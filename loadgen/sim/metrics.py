"""Prometheus collectors of a simulated variant: vLLM's metric names, so dashboards built for vLLM read it unchanged,
plus ``loadgen_sim_faults_total``. Gauges and counters are read from the engine at scrape time: nothing is updated
per token."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from loadgen.sim.engine import Engine
from loadgen.sim.faults import FaultInjector

__all__ = ["E2E_BUCKETS", "TTFT_BUCKETS", "EngineCollector", "FaultCollector"]

# vLLM's bucket boundaries.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)


class EngineCollector(Collector):
    """The engine's queue, KV usage and token counters, with vLLM's names. No `vllm:num_preemptions_total`: the
    engine reserves a sequence's whole KV before admitting it and never preempts (sim/engine.py), so a constant 0
    would only pass for a measurement."""

    def __init__(self, engine: Engine, model: str) -> None:
        self._engine, self._model = engine, model

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
        c = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=["model_name", "finished_reason"],
        )
        c.add_metric([self._model, "length"], s.requests_finished)
        yield c


class FaultCollector(Collector):
    """``loadgen_sim_faults_total{fault=...}``: every fault name is exported, 0 until injected, so rate() works."""

    def __init__(self, faults: FaultInjector) -> None:
        self._faults = faults

    def collect(self) -> Iterator[Metric]:
        c = CounterMetricFamily("loadgen_sim_faults", "Faults injected by the simulator.", labels=["fault"])
        for fault, count in self._faults.counts.items():
            c.add_metric([fault], count)
        yield c
