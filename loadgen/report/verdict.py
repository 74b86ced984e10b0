"""A report's exit code (`report["exit_code"]`), by loadgen/exit_codes.py's rule: a failed run (4) over the load
generator's own trust (3) over the target's verdict — 1 for an SLO breached, a dead target or a run `stop_when:`
ended, else 0. A dead target is the target's breach, never the load generator's untrustworthiness."""

from __future__ import annotations

from typing import Any

from loadgen.exit_codes import ExitCode

__all__ = ["exit_code", "target_breaches"]


def target_breaches(variants: list[dict[str, Any]]) -> list[str]:
    """Why a target breached whatever its SLOs say (`run.target_breaches`), per variant: none of its requests
    succeeded, or none completed inside the measured window. Empty when each variant had a success."""
    out = []
    for v in variants:
        if not v["overall"]["requests"]:
            out.append(f"variant {v['name']!r}: no request completed inside the measured window")
        elif not v["overall"]["ok"]:
            out.append(f"variant {v['name']!r}: no request succeeded: the target is unreachable or failing every one")
    return out


def exit_code(report: dict[str, Any]) -> ExitCode:
    run = report["run"]
    if run.get("failed"):  # something crashed, or the run was cut short: its figures are no verdict
        return ExitCode.RUN_FAILED
    if not run["trustworthy"]:  # the load generator's own health (run_trust, exceptions in users' tasks)
        return ExitCode.UNTRUSTWORTHY
    if run.get("stopped_early") or run.get("target_breaches"):  # never a pass, whatever its SLOs say
        return ExitCode.SLO_BREACHED
    return ExitCode.OK if report["slos_passed"] else ExitCode.SLO_BREACHED
