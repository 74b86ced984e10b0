"""The report's agent sessions (measure/sessions.py): per variant and mix, how the tasks ended, how long they took
(completed ones measured, failed and cut ones censored above them), what a completed one was made of, and the
figures a team sizes agent capacity by — sessions per hour, per user and per GPU, and session goodput; and a few
sessions step by step (`sessions_timeline`), for the HTML report's timeline chart (report/sessions_html.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loadgen.measure.sessions import SESSION_FATES, STEP_FIELDS, TIMELINE_CAP, SessionFate, SessionStats
from loadgen.report.numbers import MISSING, figure, percent, stat_ms

if TYPE_CHECKING:
    from loadgen.config.variant import Variant
    from loadgen.measure.aggregate import Aggregate

__all__ = [
    "SESSION_HEADINGS",
    "session_cells",
    "session_figures",
    "session_lines",
    "session_note",
    "session_speedup_line",
    "sessions_by_variant",
    "sessions_json",
    "sessions_timeline_json",
]

# The columns of a (variant, mix)'s row after its variant and mix: `session_cells`' keys and their headings.
SESSION_HEADINGS: dict[str, str] = {
    "sessions": "sessions",
    "fates": "by how they ended",
    "duration_p50_ms": "duration p50 ms",
    "duration_p95_ms": "p95 ms",
    "steps": "steps",
    "time_share": "time on model / tools / sub-agents",
    "cached": "cached",
    "sessions_per_hour": "sessions / h",
    "sessions_per_hour_per_gpu": "per GPU",
    "good": "good",
}


def _per(n: float, d: float) -> float | None:
    return round(n / d, 4) if d > 0 else None


def session_figures(s: SessionStats, window_s: float, users: int = 0, gpus: int | None = None) -> dict[str, Any]:
    """One (variant, mix)'s sessions as the report states them: the one definition the report, the live summary
    and the exporter share. `users` and `gpus` (the variant's): none gives no per-user / per-GPU rate."""
    done = s.completed
    per_hour = s.completed_in_window * 3600 / window_s if window_s > 0 else None
    spent = s.duration_s
    out: dict[str, Any] = {
        "sessions": s.in_window,
        "fates": {f.value: s.fates.get(f.value, 0) for f in SessionFate if s.fates.get(f.value)},
        "completed": done,
        "duration_ms": s.duration.summary_ms(s.censored),
        "per_session": {
            "steps": _per(s.steps, done),
            "subagents": _per(s.subagents, done),
            "compactions": _per(s.compactions, done),
            "input_tokens": _per(s.input_tokens, done),
            "output_tokens": _per(s.output_tokens, done),
        },
        "cached_share": _per(s.cached_tokens, s.cache_reported_tokens),
        # Where a completed session's time went: the top-level agent waiting on the model, on its tools, on its
        # sub-agents beyond its tools (the three add up to its duration).
        "time_share": {
            "model": _per(s.model_s, spent),
            "tools": _per(s.tool_s, spent),
            "subagents": _per(s.subagent_s, spent),
        },
        "sessions_per_hour": None if per_hour is None else round(per_hour, 2),
        "sessions_per_hour_per_user": None if per_hour is None or users <= 0 else round(per_hour / users, 3),
        "sessions_per_hour_per_gpu": None if per_hour is None or not gpus else round(per_hour / gpus, 3),
        "good": s.good,
        "goodput_share": _per(s.good, s.in_window),
    }
    if s.slip.count:  # a trace replayed on its recorded clock (`traffic.agent_trace.timing: offsets`)
        out["schedule_slip_ms"] = s.slip.summary_ms()
    return out


def sessions_json(agg: Aggregate, v: Variant, window_s: float, users: int) -> dict[str, Any] | None:
    """Mix -> its agent sessions on variant `v`; None when the variant ran none."""
    gpus = v.cost.gpus if v.cost is not None else None
    out = {m: session_figures(s, window_s, users, gpus) for (vn, m), s in sorted(agg.sessions.items()) if vn == v.name}
    return out or None


def sessions_timeline_json(agg: Aggregate, variant: str) -> dict[str, Any] | None:
    """A few of the variant's sessions step by step (measure/sessions.py `SessionTimelines`), None when it kept
    none: each its task key, mix and fate, and per step `STEP_FIELDS` (ms from the session's first step sent)."""
    sessions = agg.session_timelines.sessions(variant)
    if not sessions:
        return None
    return {"cap": TIMELINE_CAP, "step_fields": list(STEP_FIELDS), "sessions": sessions}


def sessions_by_variant(agg: Aggregate) -> dict[tuple[str, str | None], SessionStats]:
    """Each (variant, mix)'s sessions, and each variant's agent mixes together under (variant, None): what
    session_duration SLOs are judged on."""
    out: dict[tuple[str, str | None], SessionStats] = {}
    for (v, m), s in agg.sessions.items():
        out[(v, m)] = s
        merged = out.get((v, None))
        if merged is None:
            merged = out[(v, None)] = SessionStats()
        merged.merge(s)
    return out


def session_cells(s: dict[str, Any], missing: str = MISSING) -> dict[str, str]:
    """One (variant, mix)'s sessions (`session_figures`) as the cells of a row: report.md's and the web UI's."""
    d = s["duration_ms"]
    shares = s["time_share"]
    return {
        "sessions": f"{s['sessions']:,}",
        "fates": " · ".join(f"{f} {n:,}" for f, n in s["fates"].items()) or missing,
        "duration_p50_ms": stat_ms(d, "p50", missing),
        "duration_p95_ms": stat_ms(d, "p95", missing),
        "steps": figure(s["per_session"]["steps"], missing=missing),
        "time_share": " / ".join(percent(shares[k], missing=missing) for k in ("model", "tools", "subagents")),
        "cached": percent(s["cached_share"], missing=missing),
        "sessions_per_hour": figure(s["sessions_per_hour"], missing=missing),
        "sessions_per_hour_per_gpu": figure(s["sessions_per_hour_per_gpu"], missing=missing),
        "good": percent(s["goodput_share"], missing=missing),
    }


def session_lines(report: dict[str, Any]) -> list[str]:
    """The report.md section: one row per (variant, mix) of agent sessions."""
    rows = []
    for v in report["variants"]:
        for mix, s in (v.get("sessions") or {}).items():
            rows.append("| " + " | ".join([v["name"], mix, *session_cells(s).values()]) + " |")
    if not rows:
        return []
    lines = ["", "## Agent sessions", ""]
    if report.get("session_comparison"):
        rows.append("")
    lines.append("| " + " | ".join(["variant", "mix", *SESSION_HEADINGS.values()]) + " |")
    lines.append("|---|---|---:|---|---:|---:|---:|---|---:|---:|---:|---:|")
    lines += rows
    for e in report.get("session_comparison") or ():
        if e["stat"] in ("p50", "p99"):
            lines.append(f"- {session_speedup_line(e)}")
    lines += ["", session_note()]
    return lines + _slip_lines(report)


def _slip_lines(report: dict[str, Any]) -> list[str]:
    """The schedule slip of agent traces replayed on their recorded clock, a line per (variant, mix)."""
    out = []
    for v in report["variants"]:
        for mix, s in (v.get("sessions") or {}).items():
            slip = s.get("schedule_slip_ms")
            if slip and slip.get("count"):
                out.append(
                    f"- {v['name']} · {mix}: p50 {stat_ms(slip, 'p50')} ms, p99 {stat_ms(slip, 'p99')} ms, max "
                    f"{stat_ms(slip, 'max')} ms over {slip['count']:,} steps"
                )
    if not out:
        return []
    return [
        "",
        "Schedule slip (`traffic.agent_trace.timing: offsets`): how late the client sent a replayed step after its "
        "recorded offset, over the steps whose prerequisites (the previous step, the sub-agents joined before it) "
        "were done by then; a step that waited on the server has none.",
        "",
        *out,
    ]


def session_note() -> str:
    """What the sessions table says, under it (report.md's and report.html's)."""
    meanings = "; ".join(f"{f.value}: {SESSION_FATES[f][2]}" for f in SessionFate)
    return (
        "A session is one agent task: its steps and its sub-agents' (a mix with `agent`). Its duration runs from its "
        "first step sent to its last step's end; a failed or cut session is censored, above every completed one, so "
        "a variant cannot shorten its sessions by failing or not finishing them. Steps, tokens and where the time "
        "went are over the completed sessions; sessions / h counts those completed inside the window; good: "
        f"completed with every step within every per-request SLO. By how they ended — {meanings}."
    )


def session_speedup_line(e: dict[str, Any]) -> str:
    """A variant's session duration against the baseline's at one statistic: the speedup and its interval."""
    how = "paired by task" if e.get("paired") else "unpaired"
    if e.get("speedup") is None:
        why = "censored (failed or cut sessions)" if e.get("censored") else "no data"
        return f"{e['variant']} vs {e['baseline']}, session duration {e['stat']}: {why} ({how}, n {e.get('n', 0)})"
    ci = f"{figure(e['ci_low'], 2)}–{figure(e['ci_high'], 2)}" if e.get("ci_low") is not None else "no interval"
    return (
        f"{e['variant']} vs {e['baseline']}, session duration {e['stat']}: {figure(e['speedup'], 2)}× "
        f"({ci}, {how}, n {e['n']})"
    )
