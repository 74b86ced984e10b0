"""`loadgen trend REPORT…`: p50 and p99 of every variant's TTFT, ITL, TPOT and E2E, and its output tokens/s, across
a series of reports (a pipeline's nightly runs), in one self-contained HTML file drawn like the report's charts.

The reports are ordered by their `generated_at` (the time each run's report was built), not by the order given, so
a shell glob of file names in any naming scheme still draws time left to right; reports built in the same second
keep the order given. Every file must be a loadgen report of this schema version: anything else exits 2 naming the
file, before anything is written.
"""

from __future__ import annotations

import datetime as _dt
import html
from pathlib import Path
from typing import Any

from loadgen.report.build import SCHEMA
from loadgen.report.html import page
from loadgen.report.html_charts import Chart, color
from loadgen.report.numbers import counted
from loadgen.report.report_file import ReportFileError, incomplete, read_report_file

__all__ = ["SCHEMA", "TrendInputError", "load_reports", "render_trend", "variant_names"]

_METRICS = (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e", "E2E"))


class TrendInputError(ReportFileError):
    """A file trend cannot use; the message names it, `exit_code` whose fault (loadgen/report/report_file.py)."""


def _load(path: Path) -> dict[str, Any]:
    doc = read_report_file(path, TrendInputError)
    try:
        _dt.datetime.fromisoformat(str(doc["generated_at"]))
        if not all(
            isinstance(v["name"], str) and isinstance(v["overall"]["metrics_ms"], dict) for v in doc["variants"]
        ):
            raise TypeError
    except (KeyError, TypeError, ValueError):
        raise incomplete(path, TrendInputError, "generated_at, variants") from None
    return doc


def load_reports(paths: list[Path]) -> list[tuple[Path, dict[str, Any]]]:
    """Every report, ordered by `generated_at` (stable: ties keep the order given)."""
    loaded = [(p, _load(p)) for p in paths]
    return sorted(loaded, key=lambda pr: _dt.datetime.fromisoformat(str(pr[1]["generated_at"])))


def variant_names(series: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    names: dict[str, None] = {}
    for _, r in series:
        for v in r["variants"]:
            names.setdefault(v["name"], None)
    return list(names)


def _value(report: dict[str, Any], variant: str, metric: str, stat: str | None) -> float | None:
    v = next((x for x in report["variants"] if x["name"] == variant), None)
    if v is None:
        return None
    overall = v["overall"]
    value = overall.get(metric) if stat is None else (overall["metrics_ms"].get(metric) or {}).get(stat)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _labels(series: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    out: list[str] = []
    for _, r in series:
        at = _dt.datetime.fromisoformat(str(r["generated_at"]))
        label = at.strftime("%Y-%m-%d %H:%M")
        n = sum(1 for x in out if x == label or x.startswith(label + " #"))
        out.append(label if not n else f"{label} #{n + 1}")
    return out


def _chart(key: str, title: str, y_title: str, labels: list[str], datasets: list[dict[str, Any]], note: str) -> Chart:
    config = {
        "type": "line",
        "data": {"labels": labels, "datasets": datasets},
        "options": {
            "scales": {"y": {"min": 0, "title": {"display": True, "text": y_title}}},
            "plugins": {"legend": {"position": "bottom", "labels": {"usePointStyle": True}}},
        },
    }
    return {"id": key, "title": title, "note": note, "config": config}


def _series(label: str, values: list[float | None], colour: str, names: list[str], dashed: bool) -> dict[str, Any]:
    return {
        "label": label,
        "data": values,
        "borderColor": colour,
        "backgroundColor": colour,
        "borderDash": [6, 4] if dashed else [],
        "pointStyle": "triangle" if dashed else "circle",
        "pointRadius": 3,
        "spanGaps": False,
        "pointLabels": names,
    }


def trend_charts(series: list[tuple[Path, dict[str, Any]]]) -> list[Chart]:
    """One chart per metric (a line per variant and statistic), and one of output tokens/s (a line per variant)."""
    labels = _labels(series)
    names = [p.name for p, _ in series]
    variants = variant_names(series)
    gap = "A gap: the variant is not in that report, or its percentile fell among failed requests (censored)."
    out = []
    for metric, title in _METRICS:
        datasets = [
            _series(f"{v} {stat}", [_value(r, v, metric, stat) for _, r in series], color(i), names, stat == "p99")
            for i, v in enumerate(variants)
            for stat in ("p50", "p99")
        ]
        note = f"p50 (solid) and p99 (dashed) of each variant's {title}, all mixes together. {gap}"
        out.append(_chart(f"trend-{metric}", f"{title} across runs", f"{title} (ms)", labels, datasets, note))
    tokens = [
        _series(v, [_value(r, v, "output_tokens_per_s", None) for _, r in series], color(i), names, False)
        for i, v in enumerate(variants)
    ]
    out.append(
        _chart("trend-throughput", "Output tokens/s across runs", "output tokens/s", labels, tokens,
               "Each variant's output tokens per second over its measured window.")
    )  # fmt: skip
    return out


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _table(series: list[tuple[Path, dict[str, Any]]], labels: list[str]) -> str:
    rows = []
    for (path, r), label in zip(series, labels, strict=True):
        breached = [
            f"{s.get('variant')}: {s.get('slo', s.get('metric'))}" for s in r.get("slos", []) if not s.get("passed")
        ]
        trusted = r.get("run", {}).get("trustworthy", True)
        bad = breached or not trusted
        rows.append(
            f'<tr class="{"fail" if bad else ""}"><td class=text>{_e(label)}</td><td class=text>{_e(path.name)}</td>'
            f"<td class=text>{_e(r.get('scenario'))}</td><td>{_e(r.get('exit_code'))}</td>"
            f"<td class=text>{'yes' if trusted else 'NO'}</td><td class=text>{_e('; '.join(breached)) or '–'}</td></tr>"
        )
    head = (
        "<tr><th class=text>run (generated at, UTC)</th><th class=text>file</th><th class=text>scenario</th>"
        "<th>exit code</th><th class=text>trustworthy</th><th class=text>breached SLOs</th></tr>"
    )
    return f"<h2>Reports</h2><table>{head}{''.join(rows)}</table>"


def render_trend(series: list[tuple[Path, dict[str, Any]]]) -> str:
    """The page of `series` (as `load_reports` gives it)."""
    scenarios = sorted({str(r.get("scenario")) for _, r in series})
    body = (
        f"<h1>loadgen trend — {_e(', '.join(scenarios))}</h1>"
        f"<p class=meta>{counted(len(series), 'report')}, ordered by the time each was generated (UTC), from "
        f"{_e(series[0][1]['generated_at'])} to {_e(series[-1][1]['generated_at'])}. Latencies are of every mix "
        "together (each report's overall numbers).</p>"
    )
    after = _table(series, _labels(series))
    return page(f"loadgen trend — {', '.join(scenarios)}", body, trend_charts(series), after=after)
