"""How a figure is written for people: one rule per kind of figure, shared by the Markdown and HTML reports and the
web UI's LLM tabs, so that a number reads the same wherever it is shown.

The JSON keeps more digits than anyone reads (requests/s to 4 decimals, latencies to the µs) for the tools that
compare reports; what is printed is rounded to what the measurement supports: latencies to 0.1 ms (the HDR
histograms hold ±0.1 %, and a 0.01 ms difference in a p99 is noise), request rates to 0.01/s, token rates to 0.1/s,
the load generator's own loop lag to 0.01 ms (it is judged against a few ms). Counts are whole, with thousands
separated.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "CPU_PERCENT",
    "LATENCY_MS",
    "LOOP_LAG_MS",
    "MISSING",
    "PERCENT",
    "REQ_PER_S",
    "TOK_PER_S",
    "figure",
    "ms",
]

MISSING = "–"
# Decimals per kind of figure.
LATENCY_MS = 1
REQ_PER_S = 2
TOK_PER_S = 1
LOOP_LAG_MS = 2
CPU_PERCENT = 1
PERCENT = 2  # a share in percent (success rate, an SLO's observed share)


def figure(v: Any, decimals: int = 1, missing: str = MISSING) -> str:
    """A float to `decimals` places and an int whole, both with thousands separated; None is `missing`, anything
    else (a word such as "censored") is itself."""
    if v is None:
        return missing
    if isinstance(v, float):
        return f"{v:,.{decimals}f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


def ms(v: Any, missing: str = MISSING) -> str:
    """A latency in milliseconds."""
    return figure(float(v) if isinstance(v, int) and not isinstance(v, bool) else v, LATENCY_MS, missing)
