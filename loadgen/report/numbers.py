"""How a figure is written for people: one rule per kind of figure, shared by every report writer (Markdown, HTML,
JUnit, compare, sweep, cost, quality) and the web UI's LLM tabs, so that a number reads the same wherever it is
shown. A writer names the kind (`ms`, `stat_ms`, `percent` with `PERCENT` or `SHARE` ...), never a format string.

The JSON keeps more digits than anyone reads (requests/s to 4 decimals, latencies to the µs) for the tools that
compare reports; what is printed is rounded to what the measurement supports. The kinds:

- a latency (`ms`, `LATENCY_MS`): 0.1 ms, thousands separated — a percentile cell, an SLO's observed value, a mean,
  a paired difference (`signed`). The HDR histograms hold ±0.1 %, and a 0.01 ms difference in a p99 is noise.
  A percentile cell (`stat_ms`) is `censored` where the statistic falls among failed requests (the summary counts
  censored requests and has no value for it), `missing` where there is no value at all;
- request rates (`REQ_PER_S`): 0.01/s; token rates (`TOK_PER_S`): 0.1/s;
- the load generator's own loop lag and schedule slip (`LOOP_LAG_MS`): 0.01 ms (it is judged against a few ms);
  its CPU (`CPU_PERCENT`, already in percent, under a "%" header): 0.1;
- a rate judged against a threshold (`percent(share)`, `PERCENT`): 0.01 % — a success rate, an SLO's observed share
  (`in_percent`: a figure already in percent), the reads that came more than 1 ms late;
- a share of a whole (`SHARE`): 0.1 % — a mix's, class's or adapter's share of the requests (and the share asked
  for), the good share, the cached and shared-prefix shares, the achieved share of an open-loop rate, requests
  stopped at max_tokens, tool-call and reasoning shares, KV cache in use, prefix-cache hits, speculative acceptance,
  the queue's share of TTFT, agreement and accuracy (`percent_ci`: with its interval, "97.2 % (96.1–98.1)");
- a relative change (`CHANGE`, `signed=True`): 0.1 %, with its sign — `loadgen compare`'s NEW against BASE;
- a setting echoed back (`AS_SET`): as the user wrote it, the shortest form (`:g`) — a confidence level, an SLO's
  threshold, a regression bound, the histograms' relative error;
- dollars (`usd`): per 1M tokens (`USD_PER_1M_TOKENS`) to 4 decimals, per hour (`USD_PER_HOUR`) to 2;
- counts are whole, with thousands separated; a count printed with its noun agrees with it (`counted`: "1 request",
  "2 requests", "0 pairs").

A missing figure is `MISSING` (–); the web UI's tables, which render no markup, write — (live/web_rows.py).

Kinds kept apart on purpose: speedups (×, 2 decimals, their intervals 3 where they straddle 1.0) and a latency
fit's coefficients (decimals by the coefficient's scale) are ratios and model parameters, not latencies; and the
headless run's one-line terminal status (live/progress.py) writes whole milliseconds from 100 ms on and a bar's
whole percent, compact by design so the line fits a terminal.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AS_SET",
    "CENSORED",
    "CHANGE",
    "CPU_PERCENT",
    "LATENCY_MS",
    "LOOP_LAG_MS",
    "MISSING",
    "PERCENT",
    "REQ_PER_S",
    "SHARE",
    "TOK_PER_S",
    "USD_PER_1M_TOKENS",
    "USD_PER_HOUR",
    "counted",
    "figure",
    "in_percent",
    "ms",
    "percent",
    "percent_ci",
    "stat_ms",
    "usd",
]

MISSING = "–"
CENSORED = "censored"
# Decimals per kind of figure.
LATENCY_MS = 1
REQ_PER_S = 2
TOK_PER_S = 1
LOOP_LAG_MS = 2
CPU_PERCENT = 1
PERCENT = 2  # a rate judged against a threshold: success rate, an SLO's observed share, late reads
SHARE = 1  # a share of a whole: of the requests, of the KV cache, of the tokens that agree
CHANGE = 1  # a relative change, signed
USD_PER_1M_TOKENS = 4
USD_PER_HOUR = 2
AS_SET = None  # a setting echoed back: the shortest form, as written


def figure(v: Any, decimals: int | None = 1, missing: str = MISSING, *, signed: bool = False) -> str:
    """A float to `decimals` places (`AS_SET`: its shortest form) and an int whole, both with thousands separated
    (`signed`: with its sign, + included); None is `missing`, anything else (a word such as "censored") is itself."""
    if v is None:
        return missing
    sign = "+" if signed else ""
    if isinstance(v, float):
        return f"{v:{sign}g}" if decimals is None else f"{v:{sign},.{decimals}f}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:{sign},}"
    return str(v)


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """A whole count with its noun, in agreement: `counted(1, "request")` is "1 request", `counted(1024, "pair")`
    "1,024 pairs", `counted(2, "reply", "replies")` "2 replies"."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def ms(v: Any, missing: str = MISSING, *, signed: bool = False) -> str:
    """A latency in milliseconds (no unit)."""
    return figure(float(v) if isinstance(v, int) and not isinstance(v, bool) else v, LATENCY_MS, missing, signed=signed)


def usd(v: Any, decimals: int = USD_PER_1M_TOKENS) -> str:
    """US dollars (no unit): per 1M tokens by default, `USD_PER_HOUR` for a price per hour."""
    return figure(float(v) if isinstance(v, int) and not isinstance(v, bool) else v, decimals)


def stat_ms(summary: dict[str, Any] | None, stat: str, missing: str = MISSING) -> str:
    """One statistic (p50, p99, max ...) of a latency summary (`summary_ms`'s shape) as a cell: "censored" when it
    has no value because it falls among failed requests (the summary counts censored ones), `missing` when there is
    no value or no summary."""
    if not summary:
        return missing
    v = summary.get(stat)
    if v is None:
        return CENSORED if summary.get("censored") else missing
    return ms(v, missing)


def _pct(p: Any, decimals: int | None, missing: str, signed: bool) -> str:
    if p is None:
        return missing
    return f"{figure(float(p), decimals, missing, signed=signed)} %"


def percent(
    share: float | None, decimals: int | None = PERCENT, *, signed: bool = False, missing: str = MISSING
) -> str:
    """A 0–1 share (or change) in percent, with its unit: `percent(0.9912)` is "99.12 %", `percent(0.0312, CHANGE,
    signed=True)` "+3.1 %", `percent(0.95, AS_SET)` "95 %"."""
    return missing if share is None else _pct(100 * share, decimals, missing, signed)


def in_percent(p: float | None, decimals: int | None = PERCENT, *, missing: str = MISSING) -> str:
    """A figure already in percent (an SLO's `observed_percent` or `min_percent`), with its unit."""
    return _pct(p, decimals, missing, False)


def percent_ci(value: float | None, low: float | None, high: float | None, decimals: int = SHARE) -> str:
    """A 0–1 share with its interval, both in percent: "97.2 % (96.1–98.1)"; without a bound, the share alone."""
    if value is None:
        return MISSING
    text = percent(value, decimals)
    if low is not None and high is not None:
        text += f" ({figure(100.0 * low, decimals)}–{figure(100.0 * high, decimals)})"
    return text
