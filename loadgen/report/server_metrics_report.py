"""The servers' own metrics in the reports (`variants[].server_metrics`, filled by the master's scraper): the
Markdown summary per variant, and the series the HTML report charts on the time axis of its client-latency charts.

Pure data here; html_charts.py draws the series (this module imports nothing of it, so there is no cycle).
"""

from __future__ import annotations

from typing import Any

from loadgen.report.numbers import SHARE, percent

__all__ = ["server_metrics_lines", "server_metrics_series", "timeline_origin"]

# (series key, chart title, y axis, note)
_CHARTS = (
    ("waiting", "Server queue over time", "requests waiting", "The server's own count of queued requests."),
    ("running", "Server batch over time", "requests running", "Requests in the server's running batch."),
    ("kv_usage", "KV-cache use over time", "KV-cache use (0–1)",
     "The share of the server's KV cache in use (the mean across pods, scraped pod by pod)."),
    ("kv_usage_max", "KV-cache use of the fullest pod over time", "KV-cache use (0–1)",
     "The highest share of KV cache in use on any one pod, at each scrape."),
    ("preemptions_per_s", "Preemptions over time", "preemptions/s", "Sequences the server preempted, per second."),
    ("prefix_cache_hit_rate", "Prefix-cache hit rate over time", "hit rate (0–1)",
     "Prompt tokens served from the prefix cache ÷ looked up, per scrape interval."),
    ("spec_acceptance", "Speculative acceptance over time", "accepted ÷ drafted",
     "Draft tokens the target model accepted, per scrape interval."),
)  # fmt: skip


def _f(v: Any, nd: int) -> str:
    return "–" if v is None else f"{v:,.{nd}f}"


def _share(v: float | None) -> str:
    return percent(v, SHARE)


def server_metrics_lines(report: dict[str, Any]) -> list[str]:
    """## Server metrics: mean / max queue and batch, KV use, preemptions, prefix-cache hit rate, speculative
    acceptance per variant, from the servers' own /metrics; a skipped server with its note; a variant scraped pod
    by pod with a row per pod; several replicas behind one URL as a note, without numbers."""
    rows, notes, pod_rows = [], [], []
    for v in report.get("variants", []):
        sm = v.get("server_metrics")
        if not sm:
            continue
        if sm.get("note"):
            notes.append(f"- {v['name']}: {'⚠ ' if sm.get('several_replicas') else ''}{sm['note']}")
        if not sm.get("samples") or sm.get("several_replicas"):
            continue
        pods = sm.get("pods") or []
        for pod in pods:
            ps = pod.get("summary", {})
            pod_rows.append(
                f"| {v['name']} | {pod['url']} | {pod['samples']} | {pod['failures']} | {pod.get('restarts', 0)} | "
                f"{_f(ps.get('waiting_mean'), 1)} | {_f(ps.get('running_mean'), 1)} "
                f"| {_share(ps.get('kv_usage_mean'))} | {_share(ps.get('kv_usage_max'))} |"
            )
        s = sm.get("summary", {})
        pre = s.get("preemptions")
        rows.append(
            f"| {v['name']} | {sm.get('source') or '?'} | {sm['samples']} | {len(pods) or 'URL'} | "
            f"{_f(s.get('waiting_mean'), 1)} | "
            f"{_f(s.get('waiting_max'), 0)} | {_f(s.get('running_mean'), 1)} | {_f(s.get('running_max'), 0)} | "
            f"{_share(s.get('kv_usage_mean'))} | {_share(s.get('kv_usage_max'))} | {_f(pre, 0)} | "
            f"{_share(s.get('prefix_cache_hit_rate'))} | {_share(s.get('spec_acceptance'))} |"
        )
    if not rows and not notes:
        return []
    out = ["", "## Server metrics (the servers' own /metrics, scraped by the master)", ""]
    if rows:
        out += [
            "| variant | server | scrapes | pods | queue mean | queue max | batch mean | batch max | KV use mean "
            "| KV use max | preemptions | prefix-cache hit rate | spec. acceptance |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            *rows,
            "",
            "– : the server does not export it. Hit rate and acceptance are over the whole run (token counts). "
            "pods: scraped pod by pod (counters summed over pods, each differenced on its own; queue and batch "
            "summed; KV use the mean across pods, its max the fullest pod's); URL: through the variant's one URL.",
        ]
    if pod_rows:
        out += [
            "",
            "| variant | pod | scrapes | failures | restarts | queue mean | batch mean | KV use mean | KV use max |",
            "|---|---|---:|---:|---:|---:|---:|---:|---:|",
            *pod_rows,
        ]
    return out + notes


def timeline_origin(report: dict[str, Any]) -> float | None:
    """The wall-clock start of the report's client timeline (the first variant that has one): x = 0 of its charts."""
    starts = [(v.get("timeline") or {}).get("start_unix_s") for v in report.get("variants", [])]
    return next((s for s in starts if s is not None), None)


def server_metrics_series(report: dict[str, Any]) -> list[tuple[str, str, str, str, list[tuple[str, list[Any]]]]]:
    """Per chart (id, title, y title, note, [(variant, [[x, y], …])]): x in seconds from the start of the report's
    client timeline (`variants[].timeline.start_unix_s`), the axis of the client-latency charts."""
    origin = timeline_origin(report)
    out = []
    for key, title, y_title, note in _CHARTS:
        per_variant = []
        for v in report.get("variants", []):
            sm = v.get("server_metrics") or {}
            ys = (sm.get("series") or {}).get(key)
            ts = sm.get("t_unix_s") or []
            if not ys or not any(y is not None for y in ys):
                continue
            t0 = origin if origin is not None else ts[0]
            per_variant.append((v["name"], [[round(t - t0, 3), y] for t, y in zip(ts, ys, strict=False)]))
        if per_variant:
            out.append((f"server-{key}", title, y_title, note, per_variant))
    return out
