"""A group of requests (a variant, a mix, a priority class, an adapter) as the report's JSON: its counts, its
rates over the window, every latency's summary (failed requests censored above every measured value), its
goodput, its length buckets, its turns and its CDFs, from the merged `GroupStats` (measure/aggregate.py).
"""

from __future__ import annotations

from typing import Any

from loadgen.config.classes import sends_priority
from loadgen.config.scenario import Scenario, Variant
from loadgen.measure.aggregate import (
    BUCKET_METRICS,
    CENSORED_METRICS,
    CONNECTION_METRICS,
    METRICS,
    Aggregate,
    BucketStats,
    GroupStats,
)
from loadgen.measure.histogram import LatencyHistogram

__all__ = [
    "CDF_METRICS",
    "bucket_json",
    "buckets_json",
    "cdf_json",
    "classes_json",
    "group_json",
    "group_stat",
    "turns_json",
]

CDF_METRICS = ("ttft", "itl", "tpot", "e2e")


def _goodput_json(g: GroupStats, window_s: float) -> dict[str, Any]:
    """Requests that met every per-request SLO (`goodput:`), per second of the window beside throughput, their share
    of all requests (failures are never good), and per bound the successful requests that missed it."""
    return {
        "requests": g.goodput_ok,
        "output_tokens": g.good_output_tokens,  # theirs inside the window, as output_tokens counts them
        # Over the window, as requests/s: the good requests that completed in the drain after it are not in it.
        "per_s": round((g.goodput_ok - g.drained_good) / window_s, 4) if window_s > 0 else None,
        "share": round(g.goodput_ok / g.window_requests, 4) if g.window_requests else None,
        "judged": g.goodput_judged,
        "missed": dict(sorted(g.goodput_misses.items())),
    }


def _age_json(h: LatencyHistogram | None) -> dict[str, Any] | None:
    """How long the requests the stop cut had run (from their send, or their schedule in open loop)."""
    if h is None or not h.count:
        return None
    summary = h.summary_ms()
    return {k: summary.get(k) for k in ("count", "p50", "max")}


def group_json(g: GroupStats, window_s: float, goodput: bool = False) -> dict[str, Any]:
    """`goodput`: the scenario sets per-request SLOs (then every group says how many met them, 0 included)."""
    w = window_s if window_s > 0 else float("nan")
    metrics: dict[str, Any] = {}
    for m in (*METRICS, *CONNECTION_METRICS):
        h = g.hists.get(m)
        censored = g.censored.get(m, 0) if m in CENSORED_METRICS else 0
        if (h is not None and h.count) or censored:
            metrics[m] = h.summary_ms(censored) if h is not None else LatencyHistogram().summary_ms(censored)
    completed = sum(g.finish_reasons.values())
    out: dict[str, Any] = {
        # Every request of the group by how it ended, each once (measure/fates.py: what each counts for).
        "fates": dict(sorted(g.fates.items())),
        "requests": g.requests,
        "ok": g.ok,
        "errors": dict(sorted(g.errors.items())),
        "success_rate": round(g.ok / g.requests, 6) if g.requests else None,
        # Still in flight when the drain ended (load.drain): censored in E2E (and TTFT without a first token), not
        # in the success rate; their tokens inside the window are in output_tokens. Their age at the cut.
        "cut_by_stop": g.cut_by_stop,
        "cut_by_stop_age_ms": _age_json(g.hists.get("cut_age")),
        # Given up by the client (traffic.cancel): not in the success rate; censored in E2E (and TTFT without a first
        # token), a TTFT they had is in TTFT.
        "cancelled": g.cancelled,
        # Completed during the drain, after the window: in the latencies and the success rate, not in requests/s.
        "drained": g.drained,
        # Failed requests in the latency percentiles: above every measured value (see report text).
        "censored": dict(sorted(g.censored.items())),
        "ok_without_tokens": g.ok_without_tokens,
        "output_tokens": g.output_tokens,
        "prompt_tokens": g.prompt_tokens,
        # Successes completed inside the window, whichever it was sent in (as token throughput counts tokens).
        "requests_per_s": round(g.completed_ok / w, 4) if window_s > 0 else None,
        "output_tokens_per_s": round(g.output_tokens / w, 2) if window_s > 0 else None,
        "input_tokens_per_s": round(g.prompt_tokens / w, 2) if window_s > 0 else None,
        # Cached ÷ prompt tokens over the successful requests whose server said how many it served from its prefix
        # cache; None when none did (the server does not report it: TGI, Ollama, vLLM without prompt-token details).
        # Of the prompt tokens asked for, the share that was a shared prefix (system prompt, shared documents): what a
        # prefix cache could serve; beside what the server says it did serve.
        "shared_prefix_share": (
            round(g.shared_prefix_tokens / g.target_prompt_tokens, 4) if g.target_prompt_tokens else None
        ),
        "cached_prompt_tokens_share": (
            round(g.cached_prompt_tokens / g.cache_prompt_tokens, 4) if g.cache_prompt_tokens else None
        ),
        "cached_prompt_tokens": {
            "reported_by": g.cache_reported,
            "prompt_tokens": g.cache_prompt_tokens,
            "cached_tokens": g.cached_prompt_tokens,
        },
        "warmup_excluded": g.warmup_excluded,
        "token_count_source": dict(sorted(g.token_sources.items())),
        "finish_reasons": dict(sorted(g.finish_reasons.items())),
        # A variant that stops early (end of sequence before max_tokens) looks faster per request and is not.
        "stopped_at_max_tokens": round(g.finish_reasons.get("length", 0) / completed, 4) if completed else None,
        "metrics_ms": metrics,
    }
    if goodput:
        out["goodput"] = _goodput_json(g, window_s)
    if g.arrivals:
        out["arrivals"] = dict(sorted(g.arrivals.items()))
    return out


def bucket_json(b: BucketStats) -> dict[str, Any]:
    out: dict[str, Any] = {"requests": b.requests, "ok": b.ok}
    # The mean of what the server reported, over the successful requests that reported it (None: none did).
    out["mean_prompt_tokens"] = round(b.prompt_tokens / b.prompt_reported, 1) if b.prompt_reported else None
    for m in BUCKET_METRICS:
        h = b.hists.get(m) or LatencyHistogram()
        summary = h.summary_ms(b.censored.get(m, 0))
        out[f"{m}_ms"] = {k: summary.get(k) for k in ("p50", "p99", "count", "censored") if k in summary}
    return out


def buckets_json(agg: Aggregate, variant: str, mix: str) -> dict[str, Any]:
    return {b: bucket_json(bs) for (v, m, b), bs in sorted(agg.buckets.items()) if v == variant and m == mix}


def turns_json(agg: Aggregate, variant: str, mix: str) -> dict[str, Any]:
    """Turn number (as a string: JSON keys) -> that turn's requests of the mix's sessions; `ended` counts the
    failed ones, each of which ended its session there. Empty for a mix of single requests."""
    out: dict[str, Any] = {}
    for (v, m, t), ts in sorted(agg.turns.items()):
        if v == variant and m == mix:
            out[str(t)] = {**bucket_json(ts), "ended_by_failure": ts.requests - ts.ok}
    return out


def classes_json(
    scenario: Scenario, agg: Aggregate, v: Variant, merged: GroupStats, window_s: float
) -> dict[str, Any] | None:
    """Each priority class of the scenario, in its order, as a group of its own (every metric, censored alike)
    plus its share of the variant's requests in the window beside the share asked for, the priority it carried and
    its headers' names (values may be private). None without `traffic.classes`: one class, the variant itself."""
    classes = scenario.traffic.classes
    if not classes:
        return None
    asked = sum(c.share for c in classes)
    in_body = sends_priority(v.dialect, v.base_url)
    out: dict[str, Any] = {}
    for c in classes:
        g = agg.classes.get((v.name, c.name)) or GroupStats()
        out[c.name] = {
            **group_json(g, window_s, scenario.goodput is not None),
            "share": round(g.requests / merged.requests, 4) if merged.requests else None,
            "configured_share": round(c.share / asked, 4),
            "priority": c.priority,
            # False where the dialect has no priority field or the host rejects unknown fields: headers only.
            "priority_sent": in_body and c.priority is not None,
            "headers": sorted(c.headers),
        }
    return out


def group_stat(group: dict[str, Any], metric: str, stat: str) -> float | None:
    s = group["metrics_ms"].get(metric)
    if not s or not (s.get("count") or s.get("censored")):
        return None
    v = s.get(stat)
    return float(v) if v is not None else None


def cdf_json(g: GroupStats) -> dict[str, list[list[float]]]:
    """[ms, cumulative fraction] per metric; failed requests rank above everything (`LatencyHistogram.cdf_ms`)."""
    out = {}
    for m in CDF_METRICS:
        h = g.hists.get(m)
        if h is not None and h.count:
            out[m] = h.cdf_ms(100, g.censored.get(m, 0) if m in CENSORED_METRICS else 0)
    return out
