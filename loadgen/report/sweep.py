"""A sweep's result: per variant, one row per step (read from that step's report.json) and the knee; as JSON
(``sweep.json``) and as a Markdown table (``sweep.md``).

A rate sweep's step is keyed by ``requested_rate_per_s`` and its knee is ``knee_rate_per_s``; a concurrency sweep's
step by ``concurrency`` (users) and its knee is ``knee_concurrency``. ``plan.by`` says which."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.exit_codes import ExitCode
from loadgen.report.numbers import REQ_PER_S, TOK_PER_S, figure, ms, percent
from loadgen.report.sweep_cost import at_knee, cheapest_variant, step_cost, sweep_cost_lines
from loadgen.traffic.sweeps import StepOutcome, knee, saturated, throughput_stalled

__all__ = [
    "SCHEMA",
    "concurrency_step_row",
    "render_sweep_markdown",
    "step_outcome",
    "step_row",
    "sweep_exit_code",
    "sweep_json",
]

SCHEMA = "loadgen.sweep/1"
_METRICS = ("ttft", "itl", "e2e")


def _stat(overall: dict[str, Any], metric: str, stat: str) -> float | str | None:
    s = overall.get("metrics_ms", {}).get(metric) or {}
    v = s.get(stat)
    if v is None and s.get("censored"):
        return "censored"  # the percentile lands among failed requests
    return v


def _common(row: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
    """What every step shows from its report: throughput, latencies, success, trust and SLO verdicts."""
    overall = report["variants"][0]["overall"]
    row |= {
        "requests": overall.get("requests"),
        "success_rate": overall.get("success_rate"),
        "output_tokens_per_s": overall.get("output_tokens_per_s"),
        "requests_per_s": overall.get("requests_per_s"),
    }
    for metric in _METRICS:
        for stat in ("p50", "p99"):
            row[f"{metric}_{stat}_ms"] = _stat(overall, metric, stat)
    failed = list(report["run"].get("failed") or [])  # a step whose run failed (a crash) is no pass either
    row["trustworthy"] = bool(report["run"]["trustworthy"]) and not failed
    row["untrustworthy_reasons"] = failed + list(report["run"].get("untrustworthy_reasons", []))
    target = list(report["run"].get("target_breaches") or [])  # a dead target fails the step, SLOs or not
    row["slos_passed"] = bool(report["slos_passed"]) and not target
    row["failed_slos"] = [f"the target: {r}" for r in target] + [
        s["slo"] for s in report.get("slos", []) if not s.get("passed")
    ]
    return row | step_cost(report) | _session_cells(report)


def _session_cells(report: dict[str, Any]) -> dict[str, Any]:
    """An agent scenario's step: its sessions (all agent mixes of the variant together where there are several:
    rates added, durations from the one mix only). Empty for a scenario without agent tasks."""
    by_mix = report["variants"][0].get("sessions") or {}
    if not by_mix:
        return {}
    rates = [s["sessions_per_hour"] for s in by_mix.values() if s["sessions_per_hour"] is not None]
    one = next(iter(by_mix.values())) if len(by_mix) == 1 else None
    out: dict[str, Any] = {
        "sessions_per_hour": round(sum(rates), 2) if rates else None,
        "sessions": sum(s["sessions"] for s in by_mix.values()),
        "sessions_good": sum(s["good"] for s in by_mix.values()),
    }
    for stat in ("p50", "p95"):
        d = one["duration_ms"] if one is not None else {}
        v = d.get(stat)
        out[f"session_duration_{stat}_ms"] = "censored" if v is None and d.get("censored") else v
    return out


def step_row(rate: float, report: dict[str, Any] | None, report_path: str, exit_code: int) -> dict[str, Any]:
    """One step of a rate sweep from its run's report (None: the run wrote none, so the step is untrustworthy)."""
    row: dict[str, Any] = {"requested_rate_per_s": rate, "report": report_path, "exit_code": exit_code}
    if report is None:
        return row | {"achieved_rate_per_s": None, "trustworthy": False, "slos_passed": False, "passed": False}
    open_loop = report["variants"][0].get("open_loop") or {}
    row["achieved_rate_per_s"] = open_loop.get("achieved_rate_per_s")
    row = _common(row, report)
    sent = int(open_loop.get("sent", 0))
    scheduled = sent + int(open_loop.get("dropped", 0)) + int(open_loop.get("unsent_at_stop", 0))
    row["scheduled_in_window"] = scheduled
    row["sent_in_window"] = sent
    row["saturated"] = saturated(sent, scheduled)
    row["passed"] = step_outcome(row).passed
    return row


def _e2e_p50(row: dict[str, Any]) -> float | None:
    v = row.get("e2e_p50_ms")
    return float(v) if isinstance(v, int | float) else None


def concurrency_step_row(
    users: int, report: dict[str, Any] | None, report_path: str, exit_code: int, earlier: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """One step of a concurrency sweep (closed loop, ``users`` users) from its run's report (None: the run wrote
    none: untrustworthy). ``earlier``: the variant's steps so far; the nearest lower concurrency among the
    trustworthy ones is what ``throughput_stalled`` compares this step with (the step before, in a ladder)."""
    row: dict[str, Any] = {"concurrency": users, "report": report_path, "exit_code": exit_code}
    if report is None:
        return row | {"requests_per_s": None, "trustworthy": False, "slos_passed": False, "passed": False}
    row = _common(row, report)
    lower = [
        r
        for r in earlier
        if r["concurrency"] < users and r.get("trustworthy") and isinstance(r.get("requests_per_s"), int | float)
    ]
    below = max(lower, key=lambda r: int(r["concurrency"]), default=None)
    rps = row.get("requests_per_s")
    row["compared_with_concurrency"] = None if below is None else below["concurrency"]
    row["requests_per_s_gain"] = None
    stalled = False
    if below is not None and isinstance(rps, int | float) and below["requests_per_s"] > 0:
        row["requests_per_s_gain"] = round(rps / below["requests_per_s"] - 1, 4)
        lower_step = (int(below["concurrency"]), float(below["requests_per_s"]), _e2e_p50(below))
        stalled = throughput_stalled(users, float(rps), _e2e_p50(row), lower_step)
    row["saturated"] = stalled
    row["passed"] = step_outcome(row).passed
    return row


def _level(row: dict[str, Any]) -> float:
    return float(row["concurrency"] if "concurrency" in row else row["requested_rate_per_s"])


def step_outcome(row: dict[str, Any]) -> StepOutcome:
    return StepOutcome(
        level=_level(row),
        slos_passed=bool(row["slos_passed"]),
        saturated=bool(row.get("saturated", False)),
        untrustworthy=not row["trustworthy"],
    )


def _knee_key(plan: Mapping[str, Any]) -> str:
    return "knee_concurrency" if plan.get("by") == "concurrency" else "knee_rate_per_s"


def sweep_json(
    scenario: str,
    plan: dict[str, Any],
    step_duration_s: float,
    variants: Mapping[str, Sequence[dict[str, Any]]],
    required_rate: float | None = None,
) -> dict[str, Any]:
    """`required_rate`: the rate (req/s) the cheapest variant must meet the SLOs at (report/sweep_cost.py)."""
    plan = {"by": "rate", **plan}
    key = _knee_key(plan)
    out = []
    for name, steps in variants.items():
        outcomes = [step_outcome(s) for s in steps]
        found = knee(outcomes)
        if found is not None and plan["by"] == "concurrency":
            found = int(found)
        out.append(
            {
                "name": name,
                "steps": list(steps),
                key: found,
                "untrustworthy_steps": sum(1 for o in outcomes if o.untrustworthy),
                "usd_per_1m_output_tokens_at_knee": at_knee(steps, found),
            }
        )
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "scenario": scenario,
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "plan": plan,
        "step_duration_s": step_duration_s,
        "variants": out,
        "cost": cheapest_variant(out, key, required_rate),
    }
    doc["exit_code"] = int(sweep_exit_code(doc))
    return doc


def sweep_exit_code(doc: dict[str, Any]) -> ExitCode:
    """4 if a step's run gave no verdict (exit 4, 128 + N, or a step refused after the sweep checked it: any code
    but 0, 1 and 3), else 3 if a step was untrustworthy, else 1 if a variant never passed, else 0."""
    codes = [int(s.get("exit_code") or 0) for v in doc["variants"] for s in v["steps"]]
    verdicts = (ExitCode.OK, ExitCode.SLO_BREACHED, ExitCode.UNTRUSTWORTHY)
    if any(c not in verdicts for c in codes):
        return ExitCode.RUN_FAILED
    if any(v["untrustworthy_steps"] for v in doc["variants"]):
        return ExitCode.UNTRUSTWORTHY
    key = _knee_key(doc["plan"])
    if any(v[key] is None for v in doc["variants"]):
        return ExitCode.SLO_BREACHED
    return ExitCode.OK


def _rate(v: Any) -> str:
    """A step's level or a knee: users whole, a rate in req/s."""
    return figure(v, REQ_PER_S)


def _verdict(step: dict[str, Any]) -> str:
    if not step["trustworthy"]:
        return "untrustworthy"
    if step.get("saturated"):
        return "saturated"
    return "pass" if step["passed"] else "fail"


def _intro(doc: dict[str, Any]) -> list[str]:
    plan = doc["plan"]
    head = f"Plan: {plan['kind']} {plan['spec']}; {doc['step_duration_s']:g} s per step, "
    if plan.get("by") == "concurrency":
        think = plan.get("think_time_s") or 0
        return [
            head + f"closed loop (think time {think:g} s; achieved req/s counts the successful requests). A step "
            "passes when it meets every SLO and its users still bought throughput (else: saturated — its req/s grew "
            "by less than 5 % over the nearest lower concurrency, and by less than a quarter of the users' growth, "
            "while its E2E p50 rose); the knee is the last passing concurrency before the first failing one.",
            "",
            "| variant | knee (users) |",
            "|---|---:|",
        ]
    return [
        head + f"open loop ({plan.get('arrival', 'poisson')} arrivals). A step passes when it meets every SLO and "
        "sends at least 90 % of the arrivals its schedule put in the window (else: saturated); the knee is the "
        "last passing rate before the first failing one.",
        "",
        "| variant | knee (req/s) |",
        "|---|---:|",
    ]


def _session_table(steps: Sequence[dict[str, Any]], by_users: bool) -> list[str]:
    """The steps' agent sessions, when the scenario sends agent tasks: with users, each runs one task at a time, so
    the knee is the most concurrent agents (their sub-agents besides) that met every SLO, session ones included."""
    if not any("sessions_per_hour" in s for s in steps):
        return []
    lead = "users (agents)" if by_users else "requested req/s"
    lines = [
        "",
        f"| {lead} | sessions / h | session p50 ms | session p95 ms | good sessions |",
        "|---:|---:|---:|---:|---:|",
    ]
    for s in steps:
        level = s["concurrency"] if by_users else s["requested_rate_per_s"]
        good = f"{s['sessions_good']:,} of {s['sessions']:,}" if s.get("sessions") else "–"
        lines.append(
            f"| {_rate(level)} | {figure(s.get('sessions_per_hour'))} | {ms(s.get('session_duration_p50_ms'))} "
            f"| {ms(s.get('session_duration_p95_ms'))} | {good} |"
        )
    return lines


def render_sweep_markdown(doc: dict[str, Any]) -> str:
    by_users = doc["plan"].get("by") == "concurrency"
    key = _knee_key(doc["plan"])
    lines = [f"# Sweep: {doc['scenario']}", "", *_intro(doc)]
    lines += [f"| {v['name']} | {_rate(v[key])} |" for v in doc["variants"]]
    lead = "| users | achieved req/s" if by_users else "| requested req/s | achieved req/s"
    head = lead + (
        " | output tok/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | E2E p50 | E2E p99 | success | verdict |"
    )
    for v in doc["variants"]:
        lines += ["", f"## {v['name']}", "", "Latencies in ms.", "", head, "|" + "---:|" * 10 + "---|"]
        for s in v["steps"]:
            level = s["concurrency"] if by_users else s["requested_rate_per_s"]
            cells = [
                _rate(level),
                figure(s.get("requests_per_s") if by_users else s.get("achieved_rate_per_s"), REQ_PER_S),
                figure(s.get("output_tokens_per_s"), TOK_PER_S),
                *(ms(s.get(f"{m}_{p}_ms")) for m in ("ttft", "itl", "e2e") for p in ("p50", "p99")),
                percent(s.get("success_rate")),
                _verdict(s),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += _session_table(v["steps"], by_users)
        unit = "users" if by_users else "req/s"
        failed = [
            f"{_rate(s['concurrency'] if by_users else s['requested_rate_per_s'])} {unit}: "
            + ", ".join(s["failed_slos"])
            for s in v["steps"]
            if s.get("failed_slos")
        ]
        if failed:
            lines += ["", "Breached: " + "; ".join(failed)]
    lines += sweep_cost_lines(doc)
    return "\n".join(lines) + "\n"
