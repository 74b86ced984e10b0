"""The sentence a report says when `stop_when:` ended its run early (`run.stopped_early`): which rule, why, when,
against the planned duration, what the exit code means, and, for `slo_breached`, which test decided it and the most
it can stop a run that meets its SLOs (`figures.test`, measure/early_stop.py). Markdown and HTML say the same words."""

from __future__ import annotations

from typing import Any

__all__ = ["stopped_early_text"]

_VERDICT = {
    "slo_breached": "exit 1: the answer was known (an SLO breached)",
    "target_unreachable": "exit 1: the target could not be reached, a breach whatever its SLOs say",
}


def _test_text(test: Any) -> str:
    """What the test that stopped the run guarantees; empty for a rule that is no test (or a report before tests
    were stated)."""
    if not isinstance(test, dict) or "method" not in test:
        return ""
    if test["method"] == "certain":
        return (
            ". The test was certain: the failures alone exceed what the SLO allows of all the window's planned "
            "arrivals, so a run that meets it is never stopped"
        )
    pairs = test.get("pairs_judged", 1)
    split = f", split over the {pairs} variant-SLO pairs judged" if pairs > 1 else ""
    return (
        f". The test: {test['method']} ({test.get('reference', '')}), valid however often it is looked at: a run "
        f"whose every variant meets its SLOs is stopped with a chance of at most {100 * test['false_stop_at_most']:g} "
        f"% under continuous monitoring{split}"
    )


def stopped_early_text(run: dict[str, Any]) -> str | None:
    stop = run.get("stopped_early")
    if not stop:
        return None
    left = stop.get("arrivals_not_reached")
    unsent = f"; {left} scheduled arrivals per variant were never reached" if left else ""
    test = _test_text((stop.get("figures") or {}).get("test"))
    return (
        f"Stopped early by stop_when.{stop['rule']} at {stop['at']}, {stop['after_s']:.1f} s into the planned "
        f"{stop['planned_s']:g} s: {stop['reason']} ({_VERDICT.get(stop['verdict'], stop['verdict'])}; a run "
        f"stopped early is never a pass{unsent}){test}."
    )
