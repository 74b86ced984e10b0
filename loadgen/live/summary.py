"""The live summary of a run: the few figures the web UI's LLM tab, its charts page and the headless progress line
show, in the report's own shape (`variants[].overall` / `mixes` / `timeline`, `slos`, `run`) and with the report's
own values, at a fraction of the report's cost.

`build_report` computes every statistic of every metric of every (variant, mix, bucket), the CDFs, the paired
comparison: seconds on the master for a big run (10 variants × 5 mixes, 50,000 requests: ~4 s), far too much to redo
every 2 s while the master's loop also merges the workers' reports. This keeps the counters and, per metric, only
the percentiles shown (p50, p99) and those the scenario's SLOs ask for, read with `LatencyHistogram.percentiles_ms`.
The SLOs are judged by the report's own evaluation, so "SLO status so far" is what the report would say now, and
agent sessions (`variants[].sessions`) are the report's own figures (report/sessions.py).
"""

from __future__ import annotations

from typing import Any

from loadgen.config.scenario import Scenario
from loadgen.measure.aggregate import CENSORED_METRICS, Aggregate, GroupStats
from loadgen.metric_names import PERCENTILES
from loadgen.report.sessions import sessions_by_variant, sessions_json
from loadgen.report.slos import evaluate_slos
from loadgen.traffic.senders import scenario_senders

__all__ = ["SHOWN_METRICS", "SHOWN_STATS", "live_summary"]

SHOWN_METRICS = ("ttft", "itl", "tpot", "e2e")
SHOWN_STATS = ("p50", "p99")
_RANK = dict(PERCENTILES)


def _metric(g: GroupStats, metric: str, stats: set[str]) -> dict[str, Any] | None:
    h = g.hists.get(metric)
    censored = g.censored.get(metric, 0) if metric in CENSORED_METRICS else 0
    count = h.count if h is not None else 0
    if not count and not censored:
        return None
    out: dict[str, Any] = {"count": count}
    if censored:
        out["censored"] = censored
    if h is None:
        return out | {s: None for s in stats}
    if stats - set(_RANK):  # mean / max: rare in SLOs; the exact summary then
        full = h.summary_ms(censored)
        return out | {s: full.get(s) for s in stats}
    names = sorted(stats)
    return out | dict(zip(names, h.percentiles_ms([_RANK[s] for s in names], censored), strict=True))


def _group(g: GroupStats, window_s: float, stats: dict[str, set[str]]) -> dict[str, Any]:
    metrics = {m: s for m in stats if (s := _metric(g, m, stats[m])) is not None}
    ok_window = window_s > 0
    return {
        "fates": dict(sorted(g.fates.items())),  # as the report counts them (measure/fates.py)
        "requests": g.requests,
        "ok": g.ok,
        "errors": dict(sorted(g.errors.items())),
        "success_rate": round(g.ok / g.requests, 6) if g.requests else None,
        "cut_by_stop": g.cut_by_stop,
        "cancelled": g.cancelled,
        # Rounded as the report rounds them, so the numbers after the stop are the report's.
        "requests_per_s": round(g.completed_ok / window_s, 4) if ok_window else None,
        "output_tokens_per_s": round(g.output_tokens / window_s, 2) if ok_window else None,
        "metrics_ms": metrics,
    }


def live_summary(scenario: Scenario, agg: Aggregate, window_s: float, run: dict[str, Any]) -> dict[str, Any]:
    """`agg`, `window_s` and `run` as `build_report` takes them (the plugin's `live_state`)."""
    stats: dict[str, set[str]] = {m: set(SHOWN_STATS) for m in SHOWN_METRICS}
    for slo in scenario.slos:
        if slo.stat is not None and slo.metric != "success_rate":
            stats.setdefault(slo.metric, set(SHOWN_STATS)).add(slo.stat)
            if slo.metric in ("ttft", "e2e") and scenario.load.latency_clock == "schedule":
                # What the SLO is judged on in open loop (report/slos.py).
                stats.setdefault(f"{slo.metric}_from_schedule", set()).add(slo.stat)
    by_variant: dict[str, dict[str, GroupStats]] = {}
    for (vn, m), g in agg.groups.items():
        by_variant.setdefault(vn, {})[m] = g
    # Each variant's own users, as the report counts them (agent sessions per hour per user).
    senders = {**scenario_senders(scenario), **(run.get("users_per_variant") or {})}
    variants = []
    for v in scenario.variants:
        groups = by_variant.get(v.name, {})
        merged = agg.merged_variant(v.name) if len(groups) != 1 else next(iter(groups.values()))
        entry = {
            "name": v.name,
            "overall": _group(merged, window_s, stats),
            "mixes": {m: _group(g, window_s, stats) for m, g in sorted(groups.items())},
            # Priority classes: only for judging their SLOs (the tab's rows are per variant × mix).
            "classes": {c: _group(g, window_s, stats) for (vn, c), g in agg.classes.items() if vn == v.name},
            "timeline": agg.variant_timeline.report(v.name),
        }
        sessions = sessions_json(agg, v, window_s, senders[v.name])
        if sessions is not None:  # agent tasks: the report's own figures (one histogram summary per agent mix)
            entry["sessions"] = sessions
        variants.append(entry)
    slos = evaluate_slos(scenario, variants, sessions=sessions_by_variant(agg))
    return {
        "scenario": scenario.name,
        "run": {"window_s": round(window_s, 3), **run},
        "variants": variants,
        "slos": slos,
        "slos_passed": all(s["passed"] for s in slos),
    }
