"""The cluster Prometheus's figures in the reports (`cluster_metrics`, evaluated by the master over the run window,
live/cluster_metrics.py): the Markdown summary per query and series, the HTML report's series on the client
timeline's time axis, and the one section of a sequential run's phases (their series joined in time order).

Pure data here; html_charts.py draws the series.
"""

from __future__ import annotations

from typing import Any

from loadgen.report.server_metrics_report import timeline_origin

__all__ = ["cluster_metrics_lines", "cluster_metrics_series", "join_cluster_sections", "series_summary"]

_MAX_ROWS = 24  # Markdown rows per query; the report.json holds every series


def series_summary(values: list[float | None]) -> dict[str, float | None]:
    """A series' mean / min / max over its points (None: a gap), as report.json's `cluster_metrics` keeps them."""
    present = [v for v in values if v is not None]
    if not present:
        return {"mean": None, "min": None, "max": None}
    return {"mean": sum(present) / len(present), "min": min(present), "max": max(present)}


def _f(v: Any) -> str:
    return "–" if v is None else f"{v:,.4g}"


def _labels(labels: dict[str, str]) -> str:
    shown = {k: v for k, v in labels.items() if k != "__name__"}
    return ", ".join(f"{k}={v}" for k, v in sorted(shown.items())) or "(one series)"


def cluster_metrics_lines(report: dict[str, Any]) -> list[str]:
    """## Cluster metrics: per query and series, points, mean / min / max over the run; errors and notes."""
    cm = report.get("cluster_metrics")
    if not cm:
        return []
    out = ["", f"## Cluster metrics (Prometheus at {cm['url']}, over the run, step {cm['step_s']:g} s)", ""]
    if cm.get("note"):
        return [*out, f"- {cm['note']}"]
    rows, notes = [], []
    for q in cm.get("queries", []):
        if q.get("error"):
            notes.append(f"- `{q['name']}`: Prometheus answered {q['error']}")
            continue
        if not q.get("series"):
            notes.append(f"- `{q['name']}`: no series over the run window (`{q['query']}`)")
        for s in q["series"][:_MAX_ROWS]:
            points = sum(1 for v in s["values"] if v is not None)
            rows.append(
                f"| {q['name']} | {_labels(s['labels'])} | {points} | {_f(s['mean'])} | {_f(s['min'])} | "
                f"{_f(s['max'])} |"
            )
        left = len(q["series"]) - _MAX_ROWS + int(q.get("series_left_out") or 0)
        if left > 0:
            notes.append(
                f"- `{q['name']}`: {left} more series in report.json"
                + (f" ({q['series_left_out']} beyond the report's limit)" if q.get("series_left_out") else "")
            )
    if rows:
        out += ["| query | series | points | mean | min | max |", "|---|---|---:|---:|---:|---:|", *rows, ""]
    return out + notes


def cluster_metrics_series(report: dict[str, Any]) -> list[tuple[str, str, str, list[tuple[str, list[Any]]]]]:
    """Per query with data (chart id, title, PromQL, [(series label, [[x, y], …])]): x in seconds from the start of
    the client timeline, the axis of the client-latency charts."""
    cm = report.get("cluster_metrics") or {}
    origin = timeline_origin(report)
    out = []
    for i, q in enumerate(cm.get("queries") or []):
        lines = []
        for s in q.get("series") or []:
            ts = s.get("t_unix_s") or []
            if not ts or all(v is None for v in s.get("values") or []):
                continue
            t0 = origin if origin is not None else ts[0]
            lines.append((_labels(s["labels"]), [[round(t - t0, 3), v] for t, v in zip(ts, s["values"], strict=False)]))
        if lines:
            out.append((f"cluster-{i}", f"Cluster: {q['name']}", q["query"], lines))
    return out


def join_cluster_sections(sections: list[dict[str, Any]]) -> dict[str, Any] | None:
    """One `cluster_metrics` of several runs one after another (a sequential run's phases): the window from the first
    start to the last end, each query's series with the same labels joined in time order."""
    sections = [s for s in sections if s]
    if not sections:
        return None
    ordered = sorted(sections, key=lambda s: s["start_unix_s"])
    out: dict[str, Any] = {
        "url": ordered[0]["url"],
        "start_unix_s": ordered[0]["start_unix_s"],
        "end_unix_s": max(s["end_unix_s"] for s in ordered),
        "step_s": max(s["step_s"] for s in ordered),
        "note": "; ".join(s["note"] for s in ordered if s.get("note")) or None,
        "queries": [],
    }
    by_name: dict[str, dict[str, Any]] = {}
    for sec in ordered:
        for q in sec.get("queries") or []:
            into = by_name.get(q["name"])
            if into is None:
                into = by_name[q["name"]] = {**q, "series": [], "series_left_out": 0, "error": None}
                out["queries"].append(into)
            into["error"] = into["error"] or q.get("error")
            into["series_left_out"] = max(into["series_left_out"], int(q.get("series_left_out") or 0))
            for s in q.get("series") or []:
                same = next((t for t in into["series"] if t["labels"] == s["labels"]), None)
                if same is None:
                    into["series"].append({**s, "t_unix_s": list(s["t_unix_s"]), "values": list(s["values"])})
                else:
                    same["t_unix_s"] += s["t_unix_s"]
                    same["values"] += s["values"]
    for q in out["queries"]:
        for s in q["series"]:
            s.update(series_summary(s["values"]))
    return out
