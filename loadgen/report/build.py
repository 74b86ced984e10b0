"""The canonical JSON report (versioned) built from a merged `Aggregate`, and its Markdown rendering.

Everything a reader needs to trust a number travels with it: the histogram's relative error, where token counts came
from, the measured window, and whether the load generator itself was healthy. This module assembles it: each group
of requests is rendered by report/group_json.py, the SLOs are judged by report/slos.py, the comparison with the
baseline comes from report/compare.py.
"""

from __future__ import annotations

import datetime as _dt
from functools import partial
from pathlib import Path
from typing import Any

import orjson

from loadgen.config.scenario import Scenario
from loadgen.measure.aggregate import Aggregate, GroupStats
from loadgen.measure.histogram import RELATIVE_ERROR
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
from loadgen.report.group_json import (
    bucket_json,
    buckets_json,
    cdf_json,
    classes_json,
    group_json,
    group_stat,
    turns_json,
)
from loadgen.report.html import render_html
from loadgen.report.images import images_json
from loadgen.report.latency_fit import fit_latency
from loadgen.report.markdown import render_markdown
from loadgen.report.pooling import pooling_json
from loadgen.report.provenance import environment, safe_url, scenario_record
from loadgen.report.quality import quality_section
from loadgen.report.reasoning import reasoning_json
from loadgen.report.session_compare import session_comparison
from loadgen.report.sessions import sessions_by_variant, sessions_json, sessions_timeline_json
from loadgen.report.slos import evaluate_slos
from loadgen.report.speculative import tokens_per_chunk
from loadgen.report.tool_calls import tool_calls_entry
from loadgen.report.verdict import exit_code, target_breaches
from loadgen.traffic.scenario_schedule import requested_in_window, schedule_of, trace_summary
from loadgen.traffic.senders import scenario_senders

__all__ = ["SCHEMA", "build_report", "exit_code", "open_loop_json", "render_markdown", "write_reports"]

SCHEMA = "loadgen.report/v1"


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
                **group_json(g, window_s, scenario.goodput is not None),
                "buckets": buckets_json(agg, v.name, m),
                "turns": turns_json(agg, v.name, m),
                **images_json(agg, v.name, m, bucket_json),
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
            "overall": group_json(merged, window_s, scenario.goodput is not None),
            # A variant named by a Kubernetes selector: which Service it was at run start.
            **({"resolved_from": v.resolved_from.model_dump()} if v.resolved_from is not None else {}),
            # Cold requests (the variant's first on a worker, after it idled, on a new connection) apart from the warm.
            "starts": {st: bucket_json(bs) for (vn, st), bs in sorted(agg.starts.items()) if vn == v.name},
            "mixes": mixes,
        }
        # For the HTML report's charts: each latency's distribution (~100 points) and the variant's timeline.
        entry["overall"]["cdf_ms"] = cdf_json(merged)
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
        classes = classes_json(scenario, agg, v, merged, window_s)
        if classes is not None:
            entry["classes"] = classes
        group_of = partial(group_json, window_s=window_s, goodput=scenario.goodput is not None)
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
        sessions = sessions_json(agg, v, window_s, senders[v.name])
        if sessions is not None:  # agent tasks (`traffic.mixes[].agent`) as a unit of their own
            entry["sessions"] = sessions
        sessions_timeline = sessions_timeline_json(agg, v.name)
        if sessions_timeline is not None:  # a few of them step by step: the HTML report's timeline chart
            entry["sessions_timeline"] = sessions_timeline
        open_loop = open_loop_json(scenario, merged, window_s, senders[v.name])
        if open_loop is not None:
            entry["open_loop"] = open_loop
        variants.append(entry)
    window_s = whole_window
    whole = {v.name for v in scenario.variants if not v.stream}
    comparison = build_comparison(agg, [v.name for v in scenario.variants], baseline, scenario.seed, whole=whole)
    sessions_cmp = session_comparison(agg, [v.name for v in scenario.variants], baseline, scenario.seed)
    for x in variants:
        # The comparison's speedups (compare.SPEEDUP_DEFINITION), not a second definition; the baseline's own are 1
        # where it has a measured statistic.
        x["speedup_vs_baseline"] = (
            speedups_by_stat(comparison, x["name"])
            if not x["baseline"]
            else {
                f"{m}_{s}": None if group_stat(x["overall"], m, s) is None else 1.0
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
    slos = evaluate_slos(scenario, variants, stats, sessions_by_variant(agg))
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
        # Agent sessions' durations against the baseline's, task by task (report/session_compare.py).
        **({"session_comparison": sessions_cmp} if sessions_cmp else {}),
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


def write_reports(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """report.json (canonical), report.md and report.html side by side; returns the first two's paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jpath, mpath = out_dir / "report.json", out_dir / "report.md"
    jpath.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    mpath.write_text(render_markdown(report), encoding="utf-8")
    (out_dir / "report.html").write_text(render_html(report), encoding="utf-8")
    return jpath, mpath
