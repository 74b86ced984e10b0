"""The canonical JSON report (versioned) built from a merged `Aggregate`, and its Markdown rendering.

Everything a reader needs to trust a number travels with it: the histogram's relative error, where token counts came
from, the measured window, and whether the load generator itself was healthy.
"""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import orjson

from .aggregate import METRICS, Aggregate, GroupStats
from .config import Scenario
from .histogram import RELATIVE_ERROR

__all__ = ["SCHEMA", "build_report", "exit_code", "render_markdown", "write_reports"]

SCHEMA = "loadgen.report/v1"
EXIT_OK, EXIT_SLO, EXIT_USAGE, EXIT_UNTRUSTWORTHY = 0, 1, 2, 3
_METRIC_LABEL = {
    "ttft": "TTFT",
    "itl": "ITL (per token)",
    "icl": "ICL (per chunk)",
    "tpot": "TPOT",
    "e2e": "E2E",
    "queue_delay": "Queue delay",
}


def _safe_url(url: str) -> str:
    """Drop any user:password@ from a URL before it reaches a report."""
    u = urlsplit(url)
    host = u.hostname or ""
    if u.port:
        host = f"{host}:{u.port}"
    return urlunsplit((u.scheme, host, u.path, "", ""))


def _group_json(g: GroupStats, window_s: float) -> dict[str, Any]:
    w = window_s if window_s > 0 else float("nan")
    out: dict[str, Any] = {
        "requests": g.requests,
        "ok": g.ok,
        "errors": dict(sorted(g.errors.items())),
        "success_rate": round(g.ok / g.requests, 6) if g.requests else None,
        "output_tokens": g.output_tokens,
        "prompt_tokens": g.prompt_tokens,
        "requests_per_s": round(g.ok / w, 4) if window_s > 0 else None,
        "output_tokens_per_s": round(g.output_tokens / w, 2) if window_s > 0 else None,
        "input_tokens_per_s": round(g.prompt_tokens / w, 2) if window_s > 0 else None,
        "warmup_excluded": g.warmup_excluded,
        "token_count_source": dict(sorted(g.token_sources.items())),
        "metrics_ms": {m: g.hists[m].summary_ms() for m in METRICS if m in g.hists and g.hists[m].count},
    }
    return out


def _stat(group: dict[str, Any], metric: str, stat: str) -> float | None:
    s = group["metrics_ms"].get(metric)
    if not s or not s.get("count"):
        return None
    v = s.get(stat)
    return float(v) if v is not None else None


def _speedup(base: float | None, value: float | None) -> float | None:
    if base is None or value is None or value <= 0:
        return None
    return round(base / value, 3)


def build_report(
    scenario: Scenario,
    agg: Aggregate,
    window_s: float,
    run: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """`window_s`: the measured window (duration − warm-up, as actually run). `run`: runner facts to carry along."""
    run = dict(run or {})
    variants: list[dict[str, Any]] = []
    baseline = scenario.baseline_variant.name
    for v in scenario.variants:
        mixes = {m: _group_json(g, window_s) for (vn, m), g in sorted(agg.groups.items()) if vn == v.name}
        variants.append(
            {
                "name": v.name,
                "baseline": v.name == baseline,
                "model": v.model,
                "dialect": v.dialect,
                "base_url": _safe_url(v.base_url),
                "overall": _group_json(agg.merged_variant(v.name), window_s),
                "mixes": mixes,
            }
        )
    base = next(x for x in variants if x["baseline"])
    for x in variants:
        x["speedup_vs_baseline"] = {
            f"{m}_{s}": _speedup(_stat(base["overall"], m, s), _stat(x["overall"], m, s))
            for m, s in (("ttft", "p99"), ("e2e", "p99"), ("tpot", "p50"), ("itl", "p50"))
        }
    slos = _evaluate_slos(scenario, variants)
    reasons = list(run.get("untrustworthy_reasons", []))
    total_ok = sum(x["overall"]["ok"] for x in variants)
    total_req = sum(x["overall"]["requests"] for x in variants)
    if total_req and total_ok == 0:
        reasons.append("no request succeeded: the target is unreachable or failing every request")
    elif total_req == 0:
        reasons.append("no request completed inside the measured window")
    run["untrustworthy_reasons"] = reasons
    run["trustworthy"] = not reasons
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
        "timeline": [[s, *row] for s, row in sorted(agg.timeline.items())],
    }
    report["exit_code"] = exit_code(report)
    return report


def _evaluate_slos(scenario: Scenario, variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for slo in scenario.slos:
        for v in variants:
            if slo.variant is not None and slo.variant != v["name"]:
                continue
            group = v["overall"] if slo.mix is None else v["mixes"].get(slo.mix)
            observed = _stat(group, slo.metric, slo.stat) if group else None
            out.append(
                {
                    "metric": slo.metric,
                    "stat": slo.stat,
                    "max_ms": slo.max_ms,
                    "variant": v["name"],
                    "mix": slo.mix,
                    "observed_ms": observed,
                    # No data is not a pass: an SLO that could not be checked fails the gate.
                    "passed": observed is not None and observed <= slo.max_ms,
                }
            )
    return out


def exit_code(report: dict[str, Any]) -> int:
    if not report["run"]["trustworthy"]:
        return EXIT_UNTRUSTWORTHY
    return EXIT_OK if report["slos_passed"] else EXIT_SLO


def _fmt(v: Any, nd: int = 1) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def render_markdown(report: dict[str, Any]) -> str:
    run = report["run"]
    lines = [f"# loadgen report — {report['scenario']}", ""]
    verdict = "trustworthy" if run["trustworthy"] else "**NOT trustworthy**"
    lines.append(
        f"Measured window {run['window_s']:.1f} s (warm-up excluded) · seed {report['seed']} · "
        f"percentiles from HDR histograms, ±{report['histogram']['relative_error'] * 100:g} % · run {verdict}"
    )
    for r in run.get("untrustworthy_reasons", []):
        lines.append(f"- ⚠ {r}")
    if run.get("lost_workers"):
        lines.append(f"- ⚠ lost workers (their in-flight requests are missing): {', '.join(run['lost_workers'])}")
    lines += ["", "## Throughput and errors", ""]
    lines.append("| variant | mix | requests | ok | errors | req/s | output tok/s | input tok/s | token counts |")
    lines.append("|---|---|---:|---:|---|---:|---:|---:|---|")
    for v in report["variants"]:
        for mix, g in [("**all**", v["overall"]), *v["mixes"].items()]:
            errs = ", ".join(f"{k} {n}" for k, n in g["errors"].items()) or "0"
            src = ", ".join(g["token_count_source"]) or "–"
            lines.append(
                f"| {v['name']} | {mix} | {g['requests']} | {g['ok']} | {errs} | {_fmt(g['requests_per_s'], 2)} "
                f"| {_fmt(g['output_tokens_per_s'])} | {_fmt(g['input_tokens_per_s'])} | {src} |"
            )
    for metric in METRICS:
        rows = []
        for v in report["variants"]:
            for mix, g in [("**all**", v["overall"]), *v["mixes"].items()]:
                s = g["metrics_ms"].get(metric)
                if s and s.get("count"):
                    cells = " | ".join(_fmt(s[k], 2) for k in ("p50", "p90", "p95", "p99", "p99.9", "max", "mean"))
                    rows.append(f"| {v['name']} | {mix} | {s['count']:,} | {cells} |")
        if not rows:
            continue
        lines += ["", f"## {_METRIC_LABEL[metric]} (ms)", ""]
        lines.append("| variant | mix | samples | p50 | p90 | p95 | p99 | p99.9 | max | mean |")
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        lines += rows
    lines += ["", f"## Speedup vs baseline `{report['baseline']}` (baseline ÷ variant; > 1 is faster)", ""]
    lines.append("| variant | TTFT p99 | E2E p99 | TPOT p50 | ITL p50 |")
    lines.append("|---|---:|---:|---:|---:|")
    for v in report["variants"]:
        s = v["speedup_vs_baseline"]
        cells = " | ".join(
            "–" if s[k] is None else f"{s[k]:.2f}×" for k in ("ttft_p99", "e2e_p99", "tpot_p50", "itl_p50")
        )
        lines.append(f"| {v['name']} | {cells} |")
    if report["slos"]:
        lines += ["", "## SLOs", ""]
        lines.append("| variant | mix | SLO | observed | result |")
        lines.append("|---|---|---|---:|---|")
        for s in report["slos"]:
            res = "pass" if s["passed"] else "**FAIL**"
            lines.append(
                f"| {s['variant']} | {s['mix'] or 'all'} | {s['metric']} {s['stat']} ≤ {s['max_ms']:g} ms "
                f"| {_fmt(s['observed_ms'], 1)} | {res} |"
            )
    workers = run.get("workers") or {}
    if workers:
        lines += ["", "## Load generator health", ""]
        lines.append(
            "| worker | loop lag p50 ms | p99 ms | max ms | CPU mean % | CPU p90 % | reads > 1 ms late "
            "| latest read ms | reads taken in C |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for wid, h in sorted(workers.items()):
            lag = h.get("loop_lag_ms", {})
            cpu = h.get("cpu_percent", {})
            rd = h.get("read_delay", {})
            late = f"{100 * rd['late_share']:.2f} %" if rd else "—"
            in_c = f"{100 * rd['in_c_share']:.0f} %" if "in_c_share" in rd else "—"
            lines.append(
                f"| {wid} | {_fmt(lag.get('p50'), 2)} | {_fmt(lag.get('p99'), 2)} | {_fmt(lag.get('max'), 2)} "
                f"| {_fmt(cpu.get('mean'))} | {_fmt(cpu.get('p90'))} | {late} | {_fmt(rd.get('max_ms'), 1)} "
                f"| {in_c} |"
            )
        lines += [
            "",
            "Loop lag: how late the event loop woke from a 10 ms sleep (requests go out that late). Chunk times are "
            "the kernel's receive stamps, so a late read costs no accuracy unless a later chunk of the same stream "
            "arrived before it (then both carry the later time). Reads taken in C: token chunks the C read path "
            "accounted without Python (response heads, ends and other servers' chunk shapes are parsed in Python).",
        ]
    lines += ["", f"Exit code: {report['exit_code']}", ""]
    return "\n".join(lines)


def write_reports(report: dict[str, Any], out_dir: Path) -> tuple[Path, Path]:
    """report.json (canonical) and report.md side by side; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jpath, mpath = out_dir / "report.json", out_dir / "report.md"
    jpath.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    mpath.write_text(render_markdown(report), encoding="utf-8")
    return jpath, mpath
