"""A sweep's result: per variant, one row per step (read from that step's report.json) and the knee; as JSON
(``sweep.json``) and as a Markdown table (``sweep.md``)."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.exit_codes import ExitCode
from loadgen.traffic.sweeps import StepOutcome, knee, saturated

__all__ = ["SCHEMA", "render_sweep_markdown", "step_outcome", "step_row", "sweep_exit_code", "sweep_json"]

SCHEMA = "loadgen.sweep/1"
_METRICS = ("ttft", "itl", "e2e")


def _stat(overall: dict[str, Any], metric: str, stat: str) -> float | str | None:
    s = overall.get("metrics_ms", {}).get(metric) or {}
    v = s.get(stat)
    if v is None and s.get("censored"):
        return "censored"  # the percentile lands among failed requests
    return v


def step_row(rate: float, report: dict[str, Any] | None, report_path: str, exit_code: int) -> dict[str, Any]:
    """One step of a sweep from its run's report (None: the run wrote none, so the step is untrustworthy)."""
    row: dict[str, Any] = {"requested_rate_per_s": rate, "report": report_path, "exit_code": exit_code}
    if report is None:
        return row | {"achieved_rate_per_s": None, "trustworthy": False, "slos_passed": False, "passed": False}
    v = report["variants"][0]
    overall, open_loop = v["overall"], v.get("open_loop") or {}
    achieved = open_loop.get("achieved_rate_per_s")
    row |= {
        "achieved_rate_per_s": achieved,
        "requests": overall.get("requests"),
        "success_rate": overall.get("success_rate"),
        "output_tokens_per_s": overall.get("output_tokens_per_s"),
        "requests_per_s": overall.get("requests_per_s"),
    }
    for metric in _METRICS:
        for stat in ("p50", "p99"):
            row[f"{metric}_{stat}_ms"] = _stat(overall, metric, stat)
    row["trustworthy"] = bool(report["run"]["trustworthy"])
    row["untrustworthy_reasons"] = list(report["run"].get("untrustworthy_reasons", []))
    row["slos_passed"] = bool(report["slos_passed"])
    row["failed_slos"] = [s["slo"] for s in report.get("slos", []) if not s.get("passed")]
    sent = int(open_loop.get("sent", 0))
    scheduled = sent + int(open_loop.get("dropped", 0)) + int(open_loop.get("unsent_at_stop", 0))
    row["scheduled_in_window"] = scheduled
    row["sent_in_window"] = sent
    row["saturated"] = saturated(sent, scheduled)
    row["passed"] = step_outcome(row).passed
    return row


def step_outcome(row: dict[str, Any]) -> StepOutcome:
    return StepOutcome(
        rate=float(row["requested_rate_per_s"]),
        slos_passed=bool(row["slos_passed"]),
        saturated=bool(row.get("saturated", False)),
        untrustworthy=not row["trustworthy"],
    )


def sweep_json(
    scenario: str, plan: dict[str, Any], step_duration_s: float, variants: Mapping[str, Sequence[dict[str, Any]]]
) -> dict[str, Any]:
    out = []
    for name, steps in variants.items():
        outcomes = [step_outcome(s) for s in steps]
        out.append(
            {
                "name": name,
                "steps": list(steps),
                "knee_rate_per_s": knee(outcomes),
                "untrustworthy_steps": sum(1 for o in outcomes if o.untrustworthy),
            }
        )
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "scenario": scenario,
        "generated_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "plan": plan,
        "step_duration_s": step_duration_s,
        "variants": out,
    }
    doc["exit_code"] = int(sweep_exit_code(doc))
    return doc


def sweep_exit_code(doc: dict[str, Any]) -> ExitCode:
    """3 if a step was untrustworthy, else 1 if a variant never passed, else 0."""
    if any(v["untrustworthy_steps"] for v in doc["variants"]):
        return ExitCode.UNTRUSTWORTHY
    if any(v["knee_rate_per_s"] is None for v in doc["variants"]):
        return ExitCode.SLO_BREACHED
    return ExitCode.OK


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 10 else f"{v:,.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _verdict(step: dict[str, Any]) -> str:
    if not step["trustworthy"]:
        return "untrustworthy"
    if step.get("saturated"):
        return "saturated"
    return "pass" if step["passed"] else "fail"


def render_sweep_markdown(doc: dict[str, Any]) -> str:
    plan = doc["plan"]
    lines = [
        f"# Sweep: {doc['scenario']}",
        "",
        f"Plan: {plan['kind']} {plan['spec']}; {doc['step_duration_s']:g} s per step, open loop "
        f"({plan.get('arrival', 'poisson')} arrivals). A step passes when it meets every SLO and sends at least "
        "90 % of the arrivals its schedule put in the window (else: saturated); the knee is the highest passing rate.",
        "",
        "| variant | knee (req/s) |",
        "|---|---:|",
    ]
    lines += [f"| {v['name']} | {_fmt(v['knee_rate_per_s'])} |" for v in doc["variants"]]
    head = (
        "| requested req/s | achieved req/s | output tok/s | TTFT p50 | TTFT p99 | ITL p50 | ITL p99 | E2E p50 "
        "| E2E p99 | success | verdict |"
    )
    for v in doc["variants"]:
        lines += ["", f"## {v['name']}", "", "Latencies in ms.", "", head, "|" + "---:|" * 10 + "---|"]
        for s in v["steps"]:
            success = s.get("success_rate")
            cells = [
                s["requested_rate_per_s"],
                s.get("achieved_rate_per_s"),
                s.get("output_tokens_per_s"),
                *(s.get(f"{m}_{p}_ms") for m in ("ttft", "itl", "e2e") for p in ("p50", "p99")),
                None if success is None else f"{100 * success:.1f} %",
                _verdict(s),
            ]
            lines.append("| " + " | ".join(_fmt(c) for c in cells) + " |")
        failed = [f"{_fmt(s['requested_rate_per_s'])} req/s: {', '.join(s['failed_slos'])}" for s in v["steps"]]
        failed = [f for s, f in zip(v["steps"], failed, strict=True) if s.get("failed_slos")]
        if failed:
            lines += ["", "Breached: " + "; ".join(failed)]
    return "\n".join(lines) + "\n"
