"""The sentence a report says when `stop_when:` ended its run early (`run.stopped_early`): which rule, why, when,
against the planned duration, and what the exit code means. Markdown and HTML say the same words."""

from __future__ import annotations

from typing import Any

__all__ = ["stopped_early_text"]

_VERDICT = {
    "slo_breached": "exit 1: the answer was known (an SLO breached)",
    "target_unreachable": "exit 1: the target could not be reached, a breach whatever its SLOs say",
}


def stopped_early_text(run: dict[str, Any]) -> str | None:
    stop = run.get("stopped_early")
    if not stop:
        return None
    left = stop.get("arrivals_not_reached")
    unsent = f"; {left} scheduled arrivals per variant were never reached" if left else ""
    return (
        f"Stopped early by stop_when.{stop['rule']} at {stop['at']}, {stop['after_s']:.1f} s into the planned "
        f"{stop['planned_s']:g} s: {stop['reason']} ({_VERDICT.get(stop['verdict'], stop['verdict'])}; a run "
        f"stopped early is never a pass{unsent})"
    )
