"""The HTML report's agent sessions section: report.md's "Agent sessions" table (report/sessions.py's cells, one
definition), the paired comparison's lines, and a per-session timeline chart per variant.

The timeline draws the few sessions each variant kept step by step (`variants[].sessions_timeline`): one row per
task, its sub-agents as rows of their own under it, a floating bar per step from sent to its end (the part before
its first token darker), its tools' wait after it in grey; the gaps left are sub-agents running or being joined.
Every variant's chart has the same rows in the same order (every task any variant kept) and the same time axis, so
the same task lines up from one chart to the next.
"""

from __future__ import annotations

import html
import re
from typing import Any

from loadgen.report.html_charts import Chart, color
from loadgen.report.sessions import SESSION_HEADINGS, session_cells, session_note, session_speedup_line

__all__ = ["sessions_html", "timeline_charts"]

_TOOLS = "#bab0ac"
# Height of a row of the timeline: a tick label's line (14.4 px) and the 4 px report.js keeps between two labels.
_ROW_PX = 22


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _path_order(branch: str) -> tuple[int, ...]:
    return tuple(int(p) for p in branch.split(".")) if branch else ()


def _row_label(key: str, branch: str) -> str:
    return f"task {key}" if not branch else f"{key} ↳ sub-agent {branch}"


def _rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """(task key, agent path) of every row any variant kept: tasks in the order kept, each's agents by path."""
    tasks: dict[str, set[str]] = {}
    for v in report["variants"]:
        for s in (v.get("sessions_timeline") or {}).get("sessions", ()):
            tasks.setdefault(s["key"], {""}).update(step[0] for step in s["steps"])
    return [(key, b) for key, branches in tasks.items() for b in sorted(branches, key=_path_order)]


def _s(ms: float) -> float:
    return round(ms / 1e3, 4)


def _timeline_chart(v: dict[str, Any], i: int, labels: list[str], x_max: float) -> Chart:
    colour = color(i)
    fates = {s["key"]: s["fate"] for s in v["sessions_timeline"]["sessions"]}
    first: list[dict[str, Any]] = []  # sent -> first token
    rest: list[dict[str, Any]] = []  # first token (or sent) -> ended
    tools: list[dict[str, Any]] = []  # ended -> its tools done
    notes: tuple[list[str], list[str], list[str]] = ([], [], [])
    for s in v["sessions_timeline"]["sessions"]:
        for branch, step, sent, ttft, done, tool in s["steps"]:
            y = _row_label(s["key"], branch)
            what = f"{y}, step {step}"
            mid = sent if ttft is None else sent + ttft
            if ttft is not None:
                first.append({"x": [_s(sent), _s(mid)], "y": y})
                notes[0].append(f"{what}: TTFT {ttft:,.0f} ms")
            if done is not None:
                rest.append({"x": [_s(mid), _s(max(done, mid))], "y": y})
                notes[1].append(f"{what}: {done - sent:,.0f} ms in all" + ("" if done > mid else ", no token"))
                if tool:
                    tools.append({"x": [_s(done), _s(done + tool)], "y": y})
                    notes[2].append(f"{what}: tools {tool:,.0f} ms")

    def bars(label: str, data: list[dict[str, Any]], fill: str, note: list[str]) -> dict[str, Any]:
        return {
            "label": label,
            "data": data,
            "backgroundColor": fill,
            "borderColor": fill,
            "borderWidth": 0,
            "grouped": False,
            "barPercentage": 0.9,
            "categoryPercentage": 0.9,
            "pointLabels": note,
        }

    datasets = [
        bars("waiting for the first token (TTFT)", first, colour, notes[0]),
        bars("the rest of the reply", rest, colour + "80", notes[1]),
        bars("its tools after it", tools, _TOOLS, notes[2]),
    ]
    config = {
        "type": "bar",
        "data": {"labels": labels, "datasets": datasets},
        "options": {
            "indexAxis": "y",
            "scales": {
                "x": {
                    "type": "linear",
                    "min": 0,
                    "max": x_max,
                    "title": {"display": True, "text": "seconds from the task's first step sent"},
                },
                "y": {"ticks": {"autoSkip": False}},
            },
            # A step's bars, not every bar at the same index of each dataset (bars' default): each is its own.
            "interaction": {"mode": "point", "intersect": True},
            "plugins": {"legend": {"position": "bottom"}},
        },
    }
    ended = ", ".join(f"{k} {f}" for k, f in fates.items() if f != "completed")
    note = (
        f"{len(fates)} task(s) kept. A bar per step from sent to its end: {v['name']}'s colour until its first "
        "token, lighter for the rest of the reply; grey: the tools it waited on after it; a gap: sub-agents running "
        "or being joined. An empty row: a task or sub-agent another variant kept."
    ) + (f" Not completed: {ended}." if ended else "")
    return {"id": f"session-timeline-{i}", "title": f"{v['name']}: sessions step by step", "note": note,
            "config": config, "height_px": 110 + _ROW_PX * len(labels)}  # fmt: skip


def timeline_charts(report: dict[str, Any]) -> list[Chart]:
    """One timeline per variant that kept sessions, on the same rows and time axis; [] when none did."""
    rows = _rows(report)
    if not rows:
        return []
    labels = [_row_label(k, b) for k, b in rows]
    ends = [
        max(sent, done or 0.0) + (tool or 0.0)
        for v in report["variants"]
        for s in (v.get("sessions_timeline") or {}).get("sessions", ())
        for _, _, sent, _, done, tool in s["steps"]
    ]
    x_max = _s(max(ends, default=0.0)) or 1.0
    return [
        _timeline_chart(v, i, labels, x_max)
        for i, v in enumerate(report["variants"])
        if (v.get("sessions_timeline") or {}).get("sessions")
    ]


def _figure(c: Chart) -> str:
    return (
        f'<figure class="chart"><figcaption>{_e(c["title"])}<p>{_e(c["note"])}</p></figcaption>'
        f'<div class="box" style="height:{int(c["height_px"])}px"><canvas id="{_e(c["id"])}" role="img" '
        f'aria-label="{_e(c["title"])}"></canvas></div></figure>'
    )


def _code(text: str) -> str:
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", _e(text))


def sessions_html(report: dict[str, Any], charts: list[Chart]) -> str:
    """The section ("" when the report has no agent sessions), with `charts` (`timeline_charts`) placed in it."""
    rows = []
    for v in report["variants"]:
        for mix, s in (v.get("sessions") or {}).items():
            cells = "".join(
                f"<td{' class=text' if k in ('fates', 'time_share') else ''}>{_e(c)}</td>"
                for k, c in session_cells(s).items()
            )
            rows.append(f"<tr><td class=text>{_e(v['name'])}</td><td class=text>{_e(mix)}</td>{cells}</tr>")
    if not rows:
        return ""
    head = "".join(
        f"<th{' class=text' if k in ('fates', 'time_share') else ''}>{_e(t)}</th>" for k, t in SESSION_HEADINGS.items()
    )
    compared = [
        f"<li>{_e(session_speedup_line(e))}</li>"
        for e in report.get("session_comparison") or ()
        if e["stat"] in ("p50", "p99")
    ]
    return (
        "<h2>Agent sessions</h2>"
        f"<table><tr><th class=text>variant</th><th class=text>mix</th>{head}</tr>{''.join(rows)}</table>"
        + (f"<ul class=note>{''.join(compared)}</ul>" if compared else "")
        + f"<p class=note>{_code(session_note())}</p>"
        + "".join(_figure(c) for c in charts)
    )
