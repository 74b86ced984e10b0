"""The report's `slos`: each SLO of the scenario judged on each variant it names (its mix, priority class or
adapter, or all its requests), with what was measured, whether it passed, and how many requests breached a
latency bound; then the open-loop sustained-rate entries (report/sustained_rate.py). The live summary (web UI)
judges with the same function, so "SLO status so far" is what the report would say now.
"""

from __future__ import annotations

from typing import Any

from loadgen.config.scenario import Scenario
from loadgen.measure.aggregate import GroupStats
from loadgen.measure.sessions import SessionStats
from loadgen.metric_names import STREAM_METRICS
from loadgen.report.group_json import group_stat
from loadgen.report.sustained_rate import sustained_rate_slos

__all__ = ["evaluate_slos"]


def _breaching(g: GroupStats | None, metric: str, max_ms: float) -> int | None:
    """Requests over an SLO's bound: samples above it, plus failed requests censored in the metric (above all)."""
    if g is None:
        return None
    h = g.hists.get(metric)
    return (h.count_above(max_ms / 1e3) if h is not None else 0) + g.censored.get(metric, 0)


def _session_entry(
    entry: dict[str, Any], summary: dict[str, Any] | None, stat: str, max_ms: float, s: SessionStats | None
) -> None:
    """A session_duration SLO judged on a duration summary (measure/sessions.py's: failed and cut sessions
    censored above the completed ones), and the sessions over the bound."""
    censored = bool(summary and summary.get("censored") and summary.get(stat) is None)
    observed = None if censored or not summary else summary.get(stat)
    entry["judged_on"] = "session_duration"
    entry["observed_ms"] = observed
    entry["censored"] = censored
    entry["passed"] = observed is not None and observed <= max_ms
    if s is not None:
        entry["breaching_sessions"] = s.duration.count_above(max_ms / 1e3) + s.censored


def evaluate_slos(
    scenario: Scenario,
    variants: list[dict[str, Any]],
    stats: dict[tuple[str, str | None, str | None, str | None], GroupStats] | None = None,
    sessions: dict[tuple[str, str | None], SessionStats] | None = None,
) -> list[dict[str, Any]]:
    """`stats`: each group's GroupStats by (variant, mix, class, adapter), to count the requests over a latency
    SLO. `sessions`: each variant's agent sessions by (variant, mix), and all its agent mixes together under
    (variant, None): what a session_duration SLO is judged on (without it, on the report's sessions of the mix, or
    of the variant's one agent mix)."""
    out = []
    for slo in scenario.slos:
        for v in variants:
            if slo.variant is not None and slo.variant != v["name"]:
                continue
            if slo.metric == "session_duration":
                assert slo.stat is not None and slo.max_ms is not None
                judged: dict[str, Any] = {
                    "metric": slo.metric,
                    "stat": slo.stat,
                    "max_ms": slo.max_ms,
                    "min_percent": None,
                    "variant": v["name"],
                    "mix": slo.mix,
                    "class": None,
                    "slo": slo.describe(),
                }
                found = None if sessions is None else sessions.get((v["name"], slo.mix))
                summary: dict[str, Any] | None
                if found is not None:
                    summary = found.duration.summary_ms(found.censored)
                else:
                    by_mix = v.get("sessions") or {}
                    one = by_mix.get(slo.mix) if slo.mix is not None else next(iter(by_mix.values()), None)
                    summary = one["duration_ms"] if one is not None and (slo.mix or len(by_mix) == 1) else None
                _session_entry(judged, summary, slo.stat, slo.max_ms, found)
                out.append(judged)
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
                observed_ms = None if censored else (group_stat(group, metric, slo.stat) if group else None)
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
