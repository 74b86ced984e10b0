"""The rows of the web UI's LLM tabs, from a live summary (`live.summary`) or a report (the same keys).

Locust's extension tabs are tables: `extended_tabs` names a tab, `extended_tables` its columns (key, title), and the
rows arrive as `extended_stats` in the `/stats/requests` JSON the page polls every 2 s. Keys are snake_case here;
Locust's page camel-cases both the columns' keys and the JSON it reads, so they meet. Cells are plain text or
numbers (the page renders no markup), so a missing value is "—" rather than empty. Figures are written as the
reports write them (report/numbers.py: latencies to 0.1 ms, req/s to 0.01, tokens/s to 0.1), counts as numbers.
"""

from __future__ import annotations

from typing import Any

from loadgen.report.numbers import CPU_PERCENT, LOOP_LAG_MS, REQ_PER_S, TOK_PER_S, figure, in_percent, ms, stat_ms
from loadgen.report.sessions import session_cells

__all__ = [
    "LLM_TAB",
    "SESSIONS_TAB",
    "TABLES",
    "TABS",
    "WORKERS_TAB",
    "extended_stats",
    "llm_rows",
    "session_rows",
    "tabs_for",
    "worker_rows",
]

LLM_TAB = "llm"
WORKERS_TAB = "llm_trust"
SESSIONS_TAB = "llm_sessions"
ALL_MIXES = "all mixes"
_NONE = "—"

_LATENCY = [
    (f"{m}_{s}_ms", f"{m.upper()} {s} ms", m, s) for m in ("ttft", "itl", "tpot", "e2e") for s in ("p50", "p99")
]
_LLM_COLUMNS = [
    ("variant", "Variant"),
    ("mix", "Mix"),
    ("requests", "Requests"),
    ("ok", "OK"),
    ("errors", "Errors by class"),
    ("req_per_s", "Req/s"),
    ("output_tok_per_s", "Output tok/s"),
    *((key, title) for key, title, _, _ in _LATENCY),
    ("slo", "SLOs so far"),
    ("trust", "Run trust"),
]
_WORKER_COLUMNS = [
    ("worker", "Worker"),
    ("loop_lag_p99_ms", "Loop lag p99 ms"),
    ("cpu_p90_percent", "CPU p90 %"),
    ("schedule_slip_p99_ms", "Schedule slip p99 ms"),
    ("trust", "Trust"),
]

# Agent sessions (a mix with `agent`): the report.md section's columns (report/sessions.py `session_cells`).
_SESSION_COLUMNS = [
    ("variant", "Variant"),
    ("mix", "Mix"),
    ("sessions", "Sessions"),
    ("fates", "By how they ended"),
    ("duration_p50_ms", "Duration p50 ms"),
    ("duration_p95_ms", "Duration p95 ms"),
    ("steps", "Steps"),
    ("time_share", "Time on model / tools / sub-agents"),
    ("cached", "Cached"),
    ("sessions_per_hour", "Sessions/h"),
    ("sessions_per_hour_per_gpu", "Sessions/h per GPU"),
    ("good", "Good"),
    ("in_flight", "Under way now"),  # live only: tasks started and not yet ended (run.sessions_in_flight)
]

TABS = [{"title": "LLM", "key": LLM_TAB}, {"title": "LLM run trust", "key": WORKERS_TAB}]
TABLES = [
    {"key": LLM_TAB, "structure": [{"key": k, "title": t} for k, t in _LLM_COLUMNS]},
    {"key": WORKERS_TAB, "structure": [{"key": k, "title": t} for k, t in _WORKER_COLUMNS]},
    {"key": SESSIONS_TAB, "structure": [{"key": k, "title": t} for k, t in _SESSION_COLUMNS]},
]
_SESSIONS_TAB = {"title": "LLM agent sessions", "key": SESSIONS_TAB}


def tabs_for(agents: bool) -> list[dict[str, str]]:
    """The tabs a run shows: the agent sessions' only when the scenario has a mix with `agent`."""
    return [*TABS, _SESSIONS_TAB] if agents else list(TABS)


def _errors(errors: dict[str, int]) -> str:
    return ", ".join(f"{cls} {n}" for cls, n in sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))) or _NONE


def _num(v: Any, decimals: int) -> str:
    return figure(v, decimals, _NONE)


def _slo_status(slos: list[dict[str, Any]]) -> str:
    if not slos:
        return _NONE
    failed = [s for s in slos if not s["passed"]]
    if not failed:
        return f"pass ({len(slos)})"
    parts = []
    for s in failed:
        if s.get("observed_ms") is not None:
            parts.append(f"{s['slo']} (now {ms(s['observed_ms'])} ms)")
        elif s.get("observed_percent") is not None:
            parts.append(f"{s['slo']} (now {in_percent(s['observed_percent'])})")
        else:
            parts.append(f"{s['slo']} (no data yet)" if not s.get("censored") else f"{s['slo']} (censored)")
    return f"FAIL {len(failed)}/{len(slos)}: " + "; ".join(parts)


def _trust(run: dict[str, Any]) -> str:
    reasons = run.get("untrustworthy_reasons") or []
    lost = run.get("lost_workers") or []
    failed = run.get("failed") or []
    if failed:  # something crashed: no verdict, whatever else holds
        return "RUN FAILED: " + "; ".join(failed)
    if not reasons and not lost:
        return "ok"
    words = [*reasons, *(f"lost {w}" for w in lost)]
    return "NOT TRUSTWORTHY: " + "; ".join(words)


def _row(variant: str, mix: str, g: dict[str, Any], slos: list[dict[str, Any]], trust: str) -> dict[str, Any]:
    row: dict[str, Any] = {
        "variant": variant,
        "mix": mix,
        "requests": g["requests"],
        "ok": g["ok"],
        "errors": _errors(g["errors"]),
        "req_per_s": _num(g["requests_per_s"], REQ_PER_S),
        "output_tok_per_s": _num(g["output_tokens_per_s"], TOK_PER_S),
    }
    metrics = g["metrics_ms"]
    for key, _, m, s in _LATENCY:
        row[key] = stat_ms(metrics.get(m), s, _NONE)
    row["slo"] = _slo_status(slos)
    row["trust"] = trust
    return row


def llm_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Per variant: the row of all its mixes, then one per mix when it has several. Each with the SLOs that judge
    exactly that group (a variant's overall SLOs on its first row, a mix's on its own)."""
    trust = _trust(summary["run"])
    rows = []
    for v in summary["variants"]:
        slos = [s for s in summary["slos"] if s["variant"] == v["name"]]
        mixes = v["mixes"]
        rows.append(_row(v["name"], ALL_MIXES, v["overall"], [s for s in slos if s["mix"] is None], trust))
        if len(mixes) > 1:
            for m, g in mixes.items():
                rows.append(_row(v["name"], m, g, [s for s in slos if s["mix"] == m], trust))
    return rows


def worker_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per worker that reported (a local run: the process itself): its health and what it says of trust;
    one that left before the stop says when (its figures are whole)."""
    run = summary["run"]
    reasons = run.get("untrustworthy_reasons") or []
    left = run.get("workers_left") or {}
    rows = []
    for name, h in sorted((run.get("workers") or {}).items()):
        mine = [r.split(": ", 1)[1] for r in reasons if r.startswith(f"worker {name}: ")]
        fine = f"ok, left {left[name]:g} s in" if name in left else "ok"
        rows.append(
            {
                "worker": name,
                "loop_lag_p99_ms": _num((h.get("loop_lag_ms") or {}).get("p99"), LOOP_LAG_MS),
                "cpu_p90_percent": _num((h.get("cpu_percent") or {}).get("p90"), CPU_PERCENT),
                "schedule_slip_p99_ms": _num((h.get("schedule_slip_ms") or {}).get("p99"), LOOP_LAG_MS),
                "trust": "NOT TRUSTWORTHY: " + "; ".join(mine) if mine else fine,
            }
        )
    for name in run.get("lost_workers") or []:
        rows.append({"worker": name, **{k: _NONE for k, _ in _WORKER_COLUMNS[1:-1]}, "trust": "lost"})
    return rows


def session_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per variant and agent mix with sessions so far, in the report.md section's cells."""
    running = {(v, m): n for v, m, n in summary["run"].get("sessions_in_flight") or ()}
    return [
        {"variant": v["name"], "mix": mix, **session_cells(s, _NONE), "in_flight": running.get((v["name"], mix), 0)}
        for v in summary["variants"]
        for mix, s in (v.get("sessions") or {}).items()
    ]


def extended_stats(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """What goes under `extended_stats` in `/stats/requests`: one entry per tab (the page shows the entry of the
    tab open; that of a tab not shown is ignored)."""
    return [
        {"key": LLM_TAB, "data": llm_rows(summary)},
        {"key": WORKERS_TAB, "data": worker_rows(summary)},
        {"key": SESSIONS_TAB, "data": session_rows(summary)},
    ]
