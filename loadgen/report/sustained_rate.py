"""Open loop: did the target sustain the requested rate? The verdict's own entry, beside the SLOs.

An arrival the client could not send (dropped because every sender of its variant was busy waiting on the server,
or still waiting for a sender at the stop) is a failed request of class `not_sent` in the success rate and a
censored sample of every latency (measure/aggregate.py). This entry says the same once, in terms of rates: the
server sustained X of the requested Y req/s. A run past `load.max_not_sent_percent` is a breach (exit 1), never a
pass and never "the load generator was the bottleneck" (exit 3 stays for a generator that could not keep time:
schedule slip, loop lag, CPU — the run-trust checks).
"""

from __future__ import annotations

import math
from typing import Any

from loadgen.config.scenario import Scenario

__all__ = ["ARRIVALS_SENT", "sustained_rate_slos"]

ARRIVALS_SENT = "arrivals_sent"


def _entry(scenario: Scenario, v: dict[str, Any]) -> dict[str, Any] | None:
    o = v.get("open_loop")
    if o is None:
        return None
    not_sent = int(o["dropped"]) + int(o["unsent_at_stop"])
    arrivals = int(o["sent"]) + not_sent  # the window's arrivals (warm-up ones apart)
    allowed = scenario.load.max_not_sent_percent
    min_percent = round(100.0 - allowed, 6)
    observed = None if not arrivals else round(100.0 * o["sent"] / arrivals, 4)
    # Exact: not_sent / arrivals <= allowed / 100, in integers scaled by 10^6 (no rounding can pass 98.99995 % as 99).
    passed = arrivals > 0 and not_sent * 100_000_000 <= round(allowed * 1_000_000) * arrivals
    requested, achieved = o["requested_rate_per_s"], o["achieved_rate_per_s"]
    entry: dict[str, Any] = {
        "metric": ARRIVALS_SENT,
        "stat": None,
        "max_ms": None,
        "min_percent": min_percent,
        "variant": v["name"],
        "mix": None,
        "class": None,
        "slo": f"open-loop arrivals sent ≥ {min_percent:g} % (the requested {requested:g} req/s sustained)",
        "observed_percent": observed,
        "errors": {"not_sent": not_sent} if not_sent else {},
        "requested_rate_per_s": requested,
        "achieved_rate_per_s": achieved,
        "not_sent": not_sent,
        "arrivals": arrivals,
        "passed": passed,
    }
    if not passed and arrivals:
        entry["note"] = _why(scenario, v, o, not_sent, arrivals)
    return entry


def _why(scenario: Scenario, v: dict[str, Any], o: dict[str, Any], not_sent: int, arrivals: int) -> str:
    achieved = "?" if o["achieved_rate_per_s"] is None else f"{o['achieved_rate_per_s']:g}"
    how = "dropped" if o["overflow"] == "drop" else "still waiting for a sender at the stop"
    text = (
        f"the target sustained {achieved} of the requested {o['requested_rate_per_s']:g} req/s: {not_sent:,} of "
        f"{arrivals:,} arrivals were not sent ({how}: all {o['senders']} senders were busy waiting on the server)"
    )
    # Little's law: the requests in flight the rate needs = rate × time each spends. The mean is censored when
    # arrivals went unsent (they rank above everything), so the median of the request times, a floor of it.
    e2e = v["overall"]["metrics_ms"].get("e2e") or {}
    typical_s = (e2e.get("mean") or e2e.get("p50") or 0.0) / 1e3
    needed = o["requested_rate_per_s"] * typical_s
    senders, users = o["senders"], scenario.load.users
    if needed > senders:
        # The variant's senders are its weight's share of load.users (all of them when it runs alone or in turn):
        # load.users must grow by the ratio the variant's own senders fall short.
        share = "" if senders == users else f" (its share of load.users {users} by weight)"
        wanted = math.ceil(users * round(needed) / senders) if senders else None  # the ~N said, not its decimals
        text += (
            f"; if the server has headroom, raise load.users (at the E2E measured, {o['requested_rate_per_s']:g} "
            f"req/s keeps ~{needed:,.0f} requests in flight, and {v['name']} has {senders} senders{share}"
            + (f": load.users {wanted:,} or more gives it about as many)" if wanted is not None and share else ")")
        )
    return text


def sustained_rate_slos(scenario: Scenario, variants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per variant of an open-loop run (none in closed loop)."""
    return [e for v in variants if (e := _entry(scenario, v)) is not None]
