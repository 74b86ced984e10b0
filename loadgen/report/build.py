"""The canonical JSON report (versioned) built from a merged `Aggregate`, and its Markdown rendering.

Everything a reader needs to trust a number travels with it: the histogram's relative error, where token counts came
from, the measured window, and whether the load generator itself was healthy.
"""

from __future__ import annotations

import datetime as _dt
from functools import partial
from pathlib import Path
from typing import Any

import orjson

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
from loadgen.measure.histogram import RELATIVE_ERROR, LatencyHistogram
from loadgen.metric_names import STREAM_METRICS
from loadgen.protocol.dialects import output_length
from loadgen.report.adapters import adapters_json
from loadgen.report.compare import (
    COMPARE_METRICS,
    COMPARE_STATS,
    build_comparison,
    comparison_method,
    hdr_json,
    speedups_by_stat,
)
from loadgen.report.cost import cost_energy_json
from loadgen.report.html import render_html
from loadgen.report.images import images_json
from loadgen.report.latency_fit import fit_latency
from loadgen.report.markdown import render_markdown
from loadgen.report.pooling import pooling_json
from loadgen.report.provenance import environment, safe_url, scenario_record
from loadgen.report.quality import quality_section
from loadgen.report.reasoning import reasoning_json
from loadgen.report.speculative import tokens_per_chunk
from loadgen.report.sustained_rate import sustained_rate_slos
from loadgen.report.tool_calls import tool_calls_entry
from loadgen.report.verdict import exit_code, target_breaches
from loadgen.traffic.scenario_schedule import requested_in_window, schedule_of, trace_summary
from loadgen.traffic.senders import scenario_senders

__all__ = ["SCHEMA", "build_report", "exit_code", "open_loop_json", "render_markdown", "write_reports"]

SCHEMA = "loadgen.report/v1"
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


def _group_json(g: GroupStats, window_s: float, goodput: bool = False) -> dict[str, Any]:
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
        "requests_per_s": round((g.ok - g.drained_ok) / w, 4) if window_s > 0 else None,
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


def _bucket_json(b: BucketStats) -> dict[str, Any]:
    out: dict[str, Any] = {"requests": b.requests, "ok": b.ok}
    # The mean of what the server reported, over the successful requests that reported it (None: none did).
    out["mean_prompt_tokens"] = round(b.prompt_tokens / b.prompt_reported, 1) if b.prompt_reported else None
    for m in BUCKET_METRICS:
        h = b.hists.get(m) or LatencyHistogram()
        summary = h.summary_ms(b.censored.get(m, 0))
        out[f"{m}_ms"] = {k: summary.get(k) for k in ("p50", "p99", "count", "censored") if k in summary}
    return out


def _buckets_json(agg: Aggregate, variant: str, mix: str) -> dict[str, Any]:
    return {b: _bucket_json(bs) for (v, m, b), bs in sorted(agg.buckets.items()) if v == variant and m == mix}


def _turns_json(agg: Aggregate, variant: str, mix: str) -> dict[str, Any]:
    """Turn number (as a string: JSON keys) -> that turn's requests of the mix's sessions; `ended` counts the
    failed ones, each of which ended its session there. Empty for a mix of single requests."""
    out: dict[str, Any] = {}
    for (v, m, t), ts in sorted(agg.turns.items()):
        if v == variant and m == mix:
            out[str(t)] = {**_bucket_json(ts), "ended_by_failure": ts.requests - ts.ok}
    return out


def _classes_json(
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
            **_group_json(g, window_s, scenario.goodput is not None),
            "share": round(g.requests / merged.requests, 4) if merged.requests else None,
            "configured_share": round(c.share / asked, 4),
            "priority": c.priority,
            # False where the dialect has no priority field or the host rejects unknown fields: headers only.
            "priority_sent": in_body and c.priority is not None,
            "headers": sorted(c.headers),
        }
    return out


def open_loop_json(scenario: Scenario, g: GroupStats, window_s: float, senders: int) -> dict[str, Any] | None:
    """Requested vs achieved rate of one variant in an open-loop run (None in closed loop). `senders`: the
    variant's own users (its weight's share of `load.users`, traffic/senders.py), not the run's total.

    Requested: the schedule's global rate (what `traffic.arrivals.requested_rate` gives for all workers together;
    every variant gets the whole schedule). Achieved: the
    arrivals sent inside the measured window per second of it. Every arrival the workers reached is in exactly one
    of `sent`, `dropped`, `in_warmup` and `unsent_at_stop` (see `GroupStats.arrivals`), so nothing is lost unseen.
    """
    arrival = scenario.load.arrival
    if arrival is None:
        return None
    counts = {k: g.arrivals.get(k, 0) for k in ("sent", "dropped", "unsent_at_stop", "in_warmup")}
    schedule = schedule_of(scenario)
    assert schedule is not None
    load = scenario.load
    # Staged rates: what the stages ask for on average over the measured window (warm-up end to the end); a
    # trace's rows there per second.
    if schedule.offsets is not None:
        requested = requested_in_window(schedule, load.warmup, load.duration)
    elif schedule.profile is not None:
        requested = round(schedule.profile.mean_rate(load.warmup, load.duration), 4)
    else:
        requested = arrival.mean_rate()
    in_drain = g.arrivals.get("sent_in_drain", 0)  # of the sent: due in the window, sent in the drain after it
    achieved = (counts["sent"] - in_drain) / window_s if window_s > 0 else None
    return {
        "kind": arrival.kind,
        "burstiness": arrival.burstiness,
        "stages": None if arrival.stages is None else [st.model_dump() for st in arrival.stages],
        "overflow": scenario.load.overflow_policy,
        "senders": senders,
        "requested_rate_per_s": requested,
        "achieved_rate_per_s": None if achieved is None else round(achieved, 4),
        "achieved_share": None if achieved is None or not requested else round(achieved / requested, 4),
        **counts,
        "sent_in_drain": in_drain,
        "arrivals": sum(counts.values()),
        **({} if scenario.traffic.trace is None else {"trace": trace_summary(scenario.traffic.trace)}),
    }


def _stat(group: dict[str, Any], metric: str, stat: str) -> float | None:
    s = group["metrics_ms"].get(metric)
    if not s or not (s.get("count") or s.get("censored")):
        return None
    v = s.get(stat)
    return float(v) if v is not None else None


def _cdf_json(g: GroupStats) -> dict[str, list[list[float]]]:
    """[ms, cumulative fraction] per metric; failed requests rank above everything (`LatencyHistogram.cdf_ms`)."""
    out = {}
    for m in CDF_METRICS:
        h = g.hists.get(m)
        if h is not None and h.count:
            out[m] = h.cdf_ms(100, g.censored.get(m, 0) if m in CENSORED_METRICS else 0)
    return out


def build_report(
    scenario: Scenario,
    agg: Aggregate,
    window_s: float,
    run: dict[str, Any] | None = None,
    windows: dict[str, float] | None = None,
) -> dict[str, Any]:
    """`window_s`: the measured window (duration − warm-up, as actually run). `run`: runner facts to carry along.
    `windows`: each variant's own window where they ran one after another (`load.sequential`), else None."""
    run = dict(run or {})
    variants: list[dict[str, Any]] = []
    baseline = scenario.baseline_variant.name
    whole_window = window_s
    # Each variant's own users: what the run counted, else the scenario's weighted split of load.users.
    senders = {**scenario_senders(scenario), **(run.get("users_per_variant") or {})}
    for v in scenario.variants:
        window_s = windows.get(v.name, whole_window) if windows else whole_window
        mixes = {
            m: {
                **_group_json(g, window_s, scenario.goodput is not None),
                "buckets": _buckets_json(agg, v.name, m),
                "turns": _turns_json(agg, v.name, m),
                **images_json(agg, v.name, m, _bucket_json),
            }
            for (vn, m), g in sorted(agg.groups.items())
            if vn == v.name
        }
        merged = agg.merged_variant(v.name)
        entry: dict[str, Any] = {
            "name": v.name,
            "baseline": v.name == baseline,
            "model": v.model,
            "dialect": v.dialect,
            # False: `stream: false`, whole replies: no TTFT, ITL, ICL or TPOT (not measured), E2E and usage only.
            "streamed": v.stream,
            # enforced: the server was asked for exactly max_tokens (ignore EOS); max_only: a request may stop early.
            "output_length": output_length(v.dialect, v.extra_body),
            "base_url": safe_url(v.base_url),
            "overall": _group_json(merged, window_s, scenario.goodput is not None),
            # A variant named by a Kubernetes selector: which Service it was at run start.
            **({"resolved_from": v.resolved_from.model_dump()} if v.resolved_from is not None else {}),
            # Cold requests (the variant's first on a worker, after it idled, on a new connection) apart from the warm.
            "starts": {st: _bucket_json(bs) for (vn, st), bs in sorted(agg.starts.items()) if vn == v.name},
            "mixes": mixes,
        }
        # For the HTML report's charts: each latency's distribution (~100 points) and the variant's timeline.
        entry["overall"]["cdf_ms"] = _cdf_json(merged)
        entry["overall"]["hdr"] = hdr_json(merged)  # what `loadgen compare` resamples
        entry["timeline"] = agg.variant_timeline.report(v.name)
        fit = fit_latency(agg.latency_samples, v.name, scenario.seed)  # why TTFT and E2E are what they are
        if fit is not None:
            entry["latency_fit"] = fit
        chunks = tokens_per_chunk(agg.latency_samples, v.name)  # with speculative decoding, 1 + accepted drafts
        if chunks is not None:
            entry["tokens_per_chunk"] = chunks
        reasoning = reasoning_json(merged, {m: g for (vn, m), g in agg.groups.items() if vn == v.name})
        if reasoning is not None:  # a reasoning model's thinking and answer, apart
            entry["reasoning"] = reasoning
        entry.update(tool_calls_entry(merged, {m: g for (vn, m), g in agg.groups.items() if vn == v.name}))
        classes = _classes_json(scenario, agg, v, merged, window_s)
        if classes is not None:
            entry["classes"] = classes
        group_of = partial(_group_json, window_s=window_s, goodput=scenario.goodput is not None)
        adapters = adapters_json(v, agg.adapters, merged, group_of)
        if adapters is not None:  # per LoRA adapter its requests named (variants[].adapters)
            entry["adapters"] = adapters
        pooling = pooling_json(v, entry["overall"])
        if pooling is not None:  # embeddings / rerank: items a second beside requests
            entry["pooling"] = pooling
        if windows:
            entry["window_s"] = round(window_s, 3)
        good_tokens = merged.good_output_tokens if scenario.goodput is not None else None
        cost_energy = cost_energy_json(v, window_s, merged.output_tokens, good_tokens)
        if cost_energy is not None:
            entry["cost_energy"] = cost_energy
        open_loop = open_loop_json(scenario, merged, window_s, senders[v.name])
        if open_loop is not None:
            entry["open_loop"] = open_loop
        variants.append(entry)
    window_s = whole_window
    whole = {v.name for v in scenario.variants if not v.stream}
    comparison = build_comparison(agg, [v.name for v in scenario.variants], baseline, scenario.seed, whole=whole)
    for x in variants:
        # The comparison's speedups (compare.SPEEDUP_DEFINITION), not a second definition; the baseline's own are 1
        # where it has a measured statistic.
        x["speedup_vs_baseline"] = (
            speedups_by_stat(comparison, x["name"])
            if not x["baseline"]
            else {
                f"{m}_{s}": None if _stat(x["overall"], m, s) is None else 1.0
                for m in COMPARE_METRICS
                for s, _ in COMPARE_STATS
            }
        )
    stats: dict[tuple[str, str | None, str | None, str | None], GroupStats] = {}
    for (vn, m), g in agg.groups.items():
        stats[(vn, m, None, None)] = g
    for (vn, c), g in agg.classes.items():
        stats[(vn, None, c, None)] = g
    for (vn, a), g in agg.adapters.items():
        stats[(vn, None, None, a)] = g
    for v in scenario.variants:
        stats[(v.name, None, None, None)] = agg.merged_variant(v.name)
    slos = _evaluate_slos(scenario, variants, stats)
    run.pop("target_breaches", None)
    if target := target_breaches(variants):  # a dead target is a breach (exit 1), not the load generator's distrust
        run["target_breaches"] = target
    run["untrustworthy_reasons"] = reasons = list(run.get("untrustworthy_reasons", []))  # the generator's own health
    run["trustworthy"] = not reasons
    run.setdefault("workers", {})
    run.setdefault("worker_count", len(run["workers"]))
    run.setdefault("warmup_s", scenario.load.warmup)
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "scenario": scenario.name,
        "seed": scenario.seed,
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "histogram": {"kind": "hdr", "unit": "ms", "relative_error": RELATIVE_ERROR},
        "run": {"window_s": round(window_s, 3), **run},
        "baseline": baseline,
        "variants": variants,
        "slos": slos,
        "slos_passed": all(s["passed"] for s in slos),
        "comparison": comparison,
        "comparison_method": comparison_method(scenario.seed),
        "timeline": [[s, *row] for s, row in sorted(agg.timeline.items())],
        # How prompt lengths were made: exact in the target's tokens with a tokenizer, else words taken as tokens.
        "prompt_lengths": (
            {"exact": True, "tokenizer": scenario.tokenizer}
            if scenario.tokenizer
            else {"exact": False, "tokenizer": None}
        ),
        # To reproduce and trust it later: the scenario as it ran (no secrets) and what built the report.
        "scenario_doc": scenario_record(scenario),
        "environment": environment(),
    }
    quality = quality_section(scenario, agg, comparison)  # with `quality:`: replies against the baseline's
    if quality is not None:
        report["quality"] = quality
    report["exit_code"] = int(exit_code(report))
    return report


def _breaching(g: GroupStats | None, metric: str, max_ms: float) -> int | None:
    """Requests over an SLO's bound: samples above it, plus failed requests censored in the metric (above all)."""
    if g is None:
        return None
    h = g.hists.get(metric)
    return (h.count_above(max_ms / 1e3) if h is not None else 0) + g.censored.get(metric, 0)


def _evaluate_slos(
    scenario: Scenario,
    variants: list[dict[str, Any]],
    stats: dict[tuple[str, str | None, str | None, str | None], GroupStats] | None = None,
) -> list[dict[str, Any]]:
    """`stats`: each group's GroupStats by (variant, mix, class, adapter), to count the requests over a latency
    SLO."""
    out = []
    for slo in scenario.slos:
        for v in variants:
            if slo.variant is not None and slo.variant != v["name"]:
                continue
            if slo.metric in STREAM_METRICS and v.get("streamed") is False:
                continue  # whole replies have no TTFT, ITL or TPOT: judged on the streamed variants (the report says)
            if slo.mix is not None:
                group = v["mixes"].get(slo.mix)
            elif slo.cls is not None:
                group = v.get("classes", {}).get(slo.cls)
            elif slo.adapter is not None:
                if slo.adapter not in v.get("adapters", {}):
                    continue  # judged on the variants listing the adapter
                group = v["adapters"][slo.adapter]
            else:
                group = v["overall"]
            entry: dict[str, Any] = {
                "metric": slo.metric,
                "stat": slo.stat,
                "max_ms": slo.max_ms,
                "min_percent": slo.min_percent,
                "variant": v["name"],
                "mix": slo.mix,
                "class": slo.cls,
                **({"adapter": slo.adapter} if slo.adapter is not None else {}),
                "slo": slo.describe(),
            }
            if slo.metric == "success_rate":
                rate = group["success_rate"] if group else None
                observed = None if rate is None else round(100.0 * rate, 4)
                entry["observed_percent"] = observed
                entry["errors"] = dict(group["errors"]) if group else {}
                assert slo.min_percent is not None
                # No data is not a pass: an SLO that could not be checked fails the gate. Compared in integers
                # (ok / requests >= min_percent / 100, scaled by 10^6): no rounding passes 98.99995 % as 99 %.
                entry["passed"] = bool(group and group["requests"]) and (
                    group["ok"] * 100_000_000 >= round(slo.min_percent * 1_000_000) * group["requests"]
                )
            else:
                assert slo.stat is not None and slo.max_ms is not None
                # Open loop judges ttft / e2e from the schedule unless the scenario says send (load.latency_from):
                # an arrival that waited in the client for a free sender counts its wait.
                metric: str = slo.metric
                if metric in ("ttft", "e2e") and scenario.load.latency_clock == "schedule":
                    metric = f"{metric}_from_schedule"
                entry["judged_on"] = metric
                if metric != slo.metric:
                    entry["slo"] += " (from the schedule)"
                summary = group["metrics_ms"].get(metric) if group else None
                censored = bool(summary and summary.get("censored") and summary.get(slo.stat) is None)
                observed_ms = None if censored else (_stat(group, metric, slo.stat) if group else None)
                entry["observed_ms"] = observed_ms
                # The statistic falls among requests that failed before reaching it: it is above anything measured.
                entry["censored"] = censored
                entry["passed"] = observed_ms is not None and observed_ms <= slo.max_ms
                if stats is not None:
                    entry["breaching_requests"] = _breaching(
                        stats.get((v["name"], slo.mix, slo.cls, slo.adapter)), metric, slo.max_ms
                    )
            out.append(entry)
    return out + sustained_rate_slos(scenario, variants)


def write_reports(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """report.json (canonical), report.md and report.html side by side; returns the first two's paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jpath, mpath = out_dir / "report.json", out_dir / "report.md"
    jpath.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    mpath.write_text(render_markdown(report), encoding="utf-8")
    (out_dir / "report.html").write_text(render_html(report), encoding="utf-8")
    return jpath, mpath
