"""The HTML report's charts, as Chart.js configurations built from the canonical report JSON (and a sweep.json).

Every chart is a plain JSON-able dict `{id, title, note, config}`; `config` goes to `new Chart(canvas, config)`
unchanged (assets/report.js adds the tooltip text and the reference line). Building them here, in Python, keeps the
page's script a few lines long and lets the tests check each chart's data without a browser. A chart whose data
the report does not hold is left out, never drawn empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from loadgen.report.cluster_metrics_report import cluster_metrics_series
from loadgen.report.cost_html import cost_charts
from loadgen.report.numbers import counted
from loadgen.report.server_metrics_report import server_metrics_series

__all__ = [
    "COLORS",
    "Chart",
    "comparison_charts",
    "line",
    "report_charts",
    "sweep_charts",
    "xy_config",
]

Chart = dict[str, Any]

# Tableau 10: distinguishable, and still readable when printed in grey.
COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
_ERROR_COLORS = ("#d62728", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#9467bd", "#1f77b4")
_CDF_METRICS = (("ttft", "TTFT"), ("itl", "ITL (per token)"), ("tpot", "TPOT"), ("e2e", "E2E"))
_SWEEP_METRICS = (("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "E2E"))


def color(i: int) -> str:
    return COLORS[i % len(COLORS)]


def line(
    label: str,
    points: Sequence[Sequence[float | None]],
    colour: str,
    *,
    dashed: bool = False,
    show_line: bool = True,
    point_labels: Sequence[str] | None = None,
) -> dict[str, Any]:
    """One series of [x, y] points (y None: a gap)."""
    ds: dict[str, Any] = {
        "label": label,
        "data": [list(p) for p in points],
        "borderColor": colour,
        "backgroundColor": colour,
        "borderWidth": 2,
        "borderDash": [6, 4] if dashed else [],
        "pointRadius": 0 if show_line and len(points) > 30 else 3,
        "pointStyle": "triangle" if dashed else "circle",
        "showLine": show_line,
        "spanGaps": False,
        "fill": False,
    }
    if point_labels is not None:
        ds["pointLabels"] = list(point_labels)
    return ds


def xy_config(
    datasets: list[dict[str, Any]], x_title: str, y_title: str, *, x_log: bool = False, y_min: float | None = None
) -> dict[str, Any]:
    y: dict[str, Any] = {"title": {"display": True, "text": y_title}}
    if y_min is not None:
        y["min"] = y_min
    return {
        "type": "scatter",
        "data": {"datasets": datasets},
        "options": {
            "scales": {
                "x": {"type": "logarithmic" if x_log else "linear", "title": {"display": True, "text": x_title}},
                "y": y,
            },
            "plugins": {"legend": {"position": "bottom", "labels": {"usePointStyle": True}}},
        },
    }


def _variant_colors(report: dict[str, Any]) -> dict[str, str]:
    return {v["name"]: color(i) for i, v in enumerate(report["variants"])}


def _cdf_charts(report: dict[str, Any]) -> list[Chart]:
    colors = _variant_colors(report)
    out = []
    for metric, title in _CDF_METRICS:
        datasets = [
            line(v["name"], cdf, colors[v["name"]])
            for v in report["variants"]
            if (cdf := (v["overall"].get("cdf_ms") or {}).get(metric))
        ]
        if not datasets:
            continue
        unit = "tokens" if metric == "itl" else "requests"
        out.append(
            {
                "id": f"cdf-{metric}",
                "title": f"{title}: cumulative distribution per variant",
                "note": f"Share of {unit} at or under each latency (log scale). A curve that ends below 1 had "
                "failed requests that never reached this point (censored: slower than everything measured).",
                "config": xy_config(datasets, f"{title} (ms, log scale)", f"share of {unit}", x_log=True, y_min=0),
            }
        )
    return out


def _prompt_length_chart(report: dict[str, Any]) -> list[Chart]:
    colors = _variant_colors(report)
    datasets = []
    for v in report["variants"]:
        rows = []
        for mix, g in v["mixes"].items():
            for bucket, b in (g.get("buckets") or {}).items():
                x = b.get("mean_prompt_tokens")
                if x is not None:
                    rows.append((x, b.get("ttft_ms") or {}, f"{mix}/{bucket}, {counted(b['requests'], 'request')}"))
        rows.sort(key=lambda r: r[0])
        for stat, dashed in (("p50", False), ("p99", True)):
            pts = [(x, t.get(stat), lab) for x, t, lab in rows if t.get(stat) is not None]
            if pts:
                datasets.append(
                    line(
                        f"{v['name']} TTFT {stat}",
                        [(x, y) for x, y, _ in pts],
                        colors[v["name"]],
                        dashed=dashed,
                        show_line=False,
                        point_labels=[lab for _, _, lab in pts],
                    )
                )
    if not datasets:
        return []
    note = (
        "One point per length bucket of each mix: its mean prompt length (the server's count) and TTFT p50 (circles) "
        "/ p99 (triangles). A bucket whose server reported no prompt tokens is not drawn."
    )
    config = xy_config(datasets, "prompt tokens (mean of the bucket)", "TTFT (ms)", y_min=0)
    return [{"id": "ttft-vs-prompt", "title": "TTFT vs prompt length", "note": note, "config": config}]


def _over_time(report: dict[str, Any]) -> list[Chart]:
    colors = _variant_colors(report)
    series = [(v["name"], v["timeline"]) for v in report["variants"] if (v.get("timeline") or {}).get("ok")]
    if not series:
        return []
    bin_s = series[0][1]["bin_s"]
    x_title = f"seconds into the measured window (bins of {bin_s} s)"

    def xs(tl: dict[str, Any]) -> list[int]:
        return [i * tl["bin_s"] for i in range(len(tl["ok"]))]

    def chart(key: str, title: str, y_title: str, datasets: list[dict[str, Any]], note: str) -> Chart:
        return {"id": key, "title": title, "note": note, "config": xy_config(datasets, x_title, y_title, y_min=0)}

    tokens = [line(n, list(zip(xs(t), t["output_tokens_per_s"], strict=True)), colors[n]) for n, t in series]
    ok = [line(n, [(x, k / t["bin_s"]) for x, k in zip(xs(t), t["ok"], strict=True)], colors[n]) for n, t in series]
    out = [
        chart("time-tokens", "Output tokens/s over time", "output tokens/s", tokens,
              "Tokens counted in the second their chunk arrived, from every request (the report's throughput)."),
        chart("time-requests", "Successful requests/s over time", "requests/s", ok,
              "Requests counted where they completed."),
    ]  # fmt: skip
    for metric, title in (("ttft", "TTFT"), ("e2e", "E2E")):
        # p50 and p99 per bin (within 1 %: measure/timeline.py); a report from before they were kept: mean and max.
        low, high = ("p50", "p99") if all(f"{metric}_p50_ms" in t for _, t in series) else ("mean", "max")
        datasets = []
        for n, t in series:
            datasets.append(line(f"{n} {low}", list(zip(xs(t), t[f"{metric}_{low}_ms"], strict=True)), colors[n]))
            datasets.append(
                line(f"{n} {high}", list(zip(xs(t), t[f"{metric}_{high}_ms"], strict=True)), colors[n], dashed=True)
            )
        out.append(
            chart(f"time-{metric}", f"{title} over time", f"{title} (ms)", datasets,
                  f"{low.capitalize()} (solid) and {high} (dashed) of the requests that completed in each bin.")
        )  # fmt: skip
    out += _errors_over_time(report, series, xs(series[0][1]))
    return out


def _errors_over_time(report: dict[str, Any], series: list[tuple[str, dict[str, Any]]], x: list[int]) -> list[Chart]:
    classes = sorted({c for _, t in series for c in t.get("errors", {})})
    if not classes:
        return []
    datasets = []
    for name, t in series:
        for c in classes:
            counts = t["errors"].get(c)
            if counts and any(counts):
                colour = _ERROR_COLORS[classes.index(c) % len(_ERROR_COLORS)]
                datasets.append({"label": f"{name} · {c}", "data": counts, "stack": name, "backgroundColor": colour})
    config = {
        "type": "bar",
        "data": {"labels": x, "datasets": datasets},
        "options": {
            "scales": {
                "x": {
                    "stacked": True,
                    "title": {
                        "display": True,
                        "text": f"seconds into the measured window (bins of {series[0][1]['bin_s']} s)",
                    },
                },
                "y": {"stacked": True, "title": {"display": True, "text": "failed requests per bin"}},
            },
            "plugins": {"legend": {"position": "bottom", "labels": {"usePointStyle": True}}},
        },
    }
    note = "Failed requests by error class where they completed, one stack per variant."
    return [{"id": "time-errors", "title": "Errors over time, by class", "note": note, "config": config}]


def report_charts(report: dict[str, Any]) -> list[Chart]:
    """Every chart a report's data allows: CDFs, TTFT vs prompt length, over time, errors over time, comparison."""
    return [
        *_cdf_charts(report),
        *_prompt_length_chart(report),
        *_over_time(report),
        *_server_metrics(report),
        *_cluster_metrics(report),
        *comparison_charts(report.get("comparison") or []),
        *cost_charts(report),
    ]


def _server_metrics(report: dict[str, Any]) -> list[Chart]:
    """The servers' own metrics on the client timeline's axis (report/server_metrics_report.py)."""
    colors = _variant_colors(report)
    x_title = "seconds from the start of the client timeline"
    return [
        {"id": key, "title": title, "note": note, "config": xy_config(
            [line(n, pts, colors[n]) for n, pts in series], x_title, y_title, y_min=0)}
        for key, title, y_title, note, series in server_metrics_series(report)
    ]  # fmt: skip


def _cluster_metrics(report: dict[str, Any]) -> list[Chart]:
    """The cluster Prometheus's queries over the run (report/cluster_metrics_report.py), one chart each, on the
    client timeline's axis; series coloured in turn."""
    x_title = "seconds from the start of the client timeline"
    return [
        {"id": key, "title": title, "note": f"PromQL: {query}", "config": xy_config(
            [line(label, pts, color(i)) for i, (label, pts) in enumerate(series)], x_title, "value")}
        for key, title, query, series in cluster_metrics_series(report)
    ]  # fmt: skip


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def comparison_charts(rows: Iterable[dict[str, Any]]) -> list[Chart]:
    """Speedup vs the baseline with its confidence interval, one row per (variant, metric, stat) present."""
    rows = [r for r in rows if _num(r.get("speedup")) is not None]
    if not rows:
        return []
    labels = [f"{r.get('variant', '?')} · {r.get('metric', '?')} {r.get('stat', '')}".strip() for r in rows]

    def shade(r: dict[str, Any]) -> str:
        if r.get("within_noise"):
            return "#9e9e9e"
        return "#59a14f" if (_num(r.get("speedup")) or 0) > 1 else "#e15759"

    # A bound that fell among failed requests (censored) has no number: its bar runs to the axis on that side (0,
    # or past every drawn value), so the interval shows as open there.
    drawn = [x for r in rows for x in (_num(r.get("speedup")), _num(r.get("ci_low")), _num(r.get("ci_high"))) if x]
    edge = 1.25 * max([*drawn, 1.0])

    def interval(r: dict[str, Any]) -> list[float] | None:
        lo = 0.0 if r.get("ci_low_censored") else _num(r.get("ci_low"))
        hi = edge if r.get("ci_high_censored") else _num(r.get("ci_high"))
        return None if lo is None or hi is None else [lo, hi]

    intervals = [interval(r) for r in rows]
    datasets: list[dict[str, Any]] = [
        {
            "type": "line",
            "label": "speedup",
            "data": [_num(r["speedup"]) for r in rows],
            "showLine": False,
            "pointRadius": 5,
            "borderColor": "#222",
            "backgroundColor": [shade(r) for r in rows],
        },
        {
            "type": "bar",
            "label": "confidence interval",
            "data": intervals,
            "backgroundColor": [shade(r) + "66" for r in rows],
            "borderColor": [shade(r) for r in rows],
            "borderWidth": 1,
            "barPercentage": 0.5,
        },
    ]
    config = {
        "type": "bar",
        "data": {"labels": labels, "datasets": datasets},
        "options": {
            "indexAxis": "y",
            "scales": {
                "x": {"title": {"display": True, "text": "speedup vs baseline (baseline ÷ variant; > 1 is faster)"}}
            },
            "plugins": {"legend": {"position": "bottom"}, "loadgenRefLine": {"value": 1, "axis": "x"}},
        },
    }
    note = (
        "Point: the speedup; bar: its confidence interval. Grey: the interval contains 1.0 (within noise); "
        "green: faster; red: slower. A bar that reaches 0 or the right edge has a censored bound there (it fell "
        "among failed requests): the interval is open on that side."
    )
    return [{"id": "comparison", "title": "Speedup vs baseline, with intervals", "note": note, "config": config}]


def _step_point(step: dict[str, Any]) -> tuple[float | None, str]:
    """x of a sweep step (the rate it achieved: arrivals sent per second in open loop, successful requests per
    second in closed loop, where a step is a concurrency) and its label."""
    if "concurrency" in step:
        return _num(step.get("requests_per_s")), f"{step['concurrency']} users"
    return _num(step.get("achieved_rate_per_s")), f"requested {step['requested_rate_per_s']:g} req/s"


def _knee(v: dict[str, Any]) -> str:
    if v.get("knee_concurrency") is not None:
        return f"{v['name']} {v['knee_concurrency']} users"
    if v.get("knee_rate_per_s") is not None:
        return f"{v['name']} {v['knee_rate_per_s']:g} req/s"
    return f"{v['name']} none"


def sweep_charts(sweep: dict[str, Any]) -> list[Chart]:
    """A sweep's latency–throughput curves: per metric, p50 (solid) and p99 (dashed) per variant against the rate
    each step achieved (a rate sweep's or a concurrency sweep's)."""
    out = []
    variants = sweep.get("variants") or []
    closed = any("concurrency" in s for v in variants for s in v.get("steps", []))
    x_title = "successful requests/s" if closed else "achieved rate (req/s)"
    for metric, title in _SWEEP_METRICS:
        datasets = []
        for i, v in enumerate(variants):
            for stat, dashed in (("p50", False), ("p99", True)):
                pts = []
                for s in v.get("steps", []):
                    x, label = _step_point(s)
                    y = _num(s.get(f"{metric}_{stat}_ms"))  # "censored" (a string) is not drawn
                    if x is not None and y is not None:
                        pts.append((x, y, label))
                pts.sort()
                if pts:
                    datasets.append(
                        line(
                            f"{v['name']} {stat}",
                            [(x, y) for x, y, _ in pts],
                            color(i),
                            dashed=dashed,
                            point_labels=[lab for _, _, lab in pts],
                        )
                    )
        if datasets:
            out.append(
                {
                    "id": f"sweep-{metric}",
                    "title": f"Sweep: {title} vs {x_title.split(' (')[0]}",
                    "note": "One point per step; a censored percentile (among failed requests) is not drawn. "
                    f"Knee (last passing step before the first failing one): {', '.join(_knee(v) for v in variants)}.",
                    "config": xy_config(datasets, x_title, f"{title} (ms)", y_min=0),
                }
            )
    return out
