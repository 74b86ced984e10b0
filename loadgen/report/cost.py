"""Cost and energy per variant: report.json's `variants[].cost_energy`, its arithmetic and its Markdown table.

- Cost: the deployment's price per hour (`variants[].cost`) over the measured window, divided by the tokens of the
  window: `usd_per_1m_output_tokens = usd_per_hour × window_h / output_tokens × 10⁶`, i.e. usd_per_hour ÷ output
  tokens per hour. Per 1M *good* tokens: the same spend over the output tokens of the requests that met every
  per-request SLO (`goodput:`) — what a useful token costs when the others are paid for too.
- Energy: the variant's power (watts, a `variants[].power` query of the cluster Prometheus) integrated over the
  measured window by trapezoids between the query's samples; before the first sample and after the last (a range
  query's points fall on its step, so they rarely meet the window's edges) the nearest value is held. A gap where
  Prometheus had no value is bridged by the trapezoid across it; `coverage` says how much of the window samples
  span. Joules per output token = joules ÷ output tokens; output tokens per joule its inverse.
- GPU memory: the max and mean over the window of a `variants[].gpu_memory` query (in GiB), and the server's own
  KV-cache use (its /metrics, `server_metrics.series.kv_usage`) beside it when it was scraped.

Pure functions of numbers: the master's Prometheus reads are in live/variant_power.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from loadgen.config.cost import VariantCost
from loadgen.config.variant import Variant
from loadgen.report.numbers import SHARE, USD_PER_HOUR, percent, usd

# Until the master reads the cluster Prometheus (live/variant_power.py): a report rebuilt from records has no power.
NOT_READ = "not read: the master reads it from metrics.prometheus over the run's window"

__all__ = [
    "cost_energy_json",
    "cost_json",
    "energy_json",
    "memory_json",
    "per_million",
    "render_cost_markdown",
    "trapezoid_joules",
]


def per_million(usd_per_hour: float, window_s: float, tokens: int) -> float | None:
    """Dollars per 1M tokens: the window's spend over its tokens (None without a token or a window)."""
    if tokens <= 0 or window_s <= 0:
        return None
    return usd_per_hour * (window_s / 3600.0) / tokens * 1e6


def _round(x: float | None, digits: int = 6) -> float | None:
    return None if x is None else round(x, digits)


def cost_json(cost: VariantCost, window_s: float, output_tokens: int, good_tokens: int | None) -> dict[str, Any]:
    """`cost_energy.cost` of one variant. `good_tokens`: None without per-request SLOs (no goodput)."""
    hourly = cost.hourly_usd()
    good = None if good_tokens is None else per_million(hourly, window_s, good_tokens)
    return {
        "usd_per_hour": hourly,
        "usd_per_gpu_hour": cost.usd_per_gpu_hour,
        "gpus": cost.gpus,
        "usd_in_window": round(hourly * window_s / 3600.0, 6),
        "usd_per_1m_output_tokens": _round(per_million(hourly, window_s, output_tokens)),
        "usd_per_1m_good_tokens": _round(good),
    }


def cost_energy_json(
    variant: Variant, window_s: float, output_tokens: int, good_tokens: int | None
) -> dict[str, Any] | None:
    """`variants[].cost_energy` as the report is built (None when the variant declares none of cost, power, GPU
    memory); the power and memory queries' figures are filled in when the master reads them."""
    if variant.cost is None and variant.power is None and variant.gpu_memory is None:
        return None
    unread = {"samples": 0, "note": NOT_READ}
    return {
        "window_s": round(window_s, 3),
        "output_tokens": output_tokens,
        "good_output_tokens": good_tokens,
        "cost": None if variant.cost is None else cost_json(variant.cost, window_s, output_tokens, good_tokens),
        "energy": None if variant.power is None else {"query": variant.power.query, **unread},
        "gpu_memory": None if variant.gpu_memory is None else {"query": variant.gpu_memory.query, **unread},
        "kv": None,
    }


def trapezoid_joules(
    t: Sequence[float], watts: Sequence[float | None], start: float, end: float
) -> tuple[float, float] | None:
    """(joules over [start, end], share of the window the samples span) from power samples (t in unix seconds, in
    order; None: no value there). Trapezoids between samples; the first and last value held to the window's edges.
    None without a value inside the window."""
    points = [(ti, w) for ti, w in zip(t, watts, strict=True) if w is not None and start <= ti <= end]
    if not points or end <= start:
        return None
    (t0, w0), (t1, w1) = points[0], points[-1]
    joules = w0 * (t0 - start) + w1 * (end - t1)
    for (ta, wa), (tb, wb) in zip(points, points[1:], strict=False):
        joules += (wa + wb) / 2.0 * (tb - ta)
    return joules, (t1 - t0) / (end - start)


def energy_json(
    query: str, t: Sequence[float], watts: Sequence[float | None], start: float, end: float, output_tokens: int
) -> dict[str, Any]:
    """`cost_energy.energy` of one variant from its power query's one series over the window [start, end]."""
    out: dict[str, Any] = {"query": query, "samples": sum(w is not None for w in watts), "note": None}
    out |= {"start_unix_s": round(start, 3), "end_unix_s": round(end, 3)}
    out |= dict.fromkeys(("joules", "mean_watts", "coverage", "joules_per_output_token", "output_tokens_per_joule"))
    found = trapezoid_joules(t, watts, start, end)
    if found is None:
        out["note"] = "the query gave no value inside the measured window"
        return out
    joules, coverage = found
    out |= {"joules": round(joules, 3), "mean_watts": round(joules / (end - start), 3), "coverage": round(coverage, 4)}
    if output_tokens > 0 and joules > 0:
        out["joules_per_output_token"] = round(joules / output_tokens, 6)
        out["output_tokens_per_joule"] = round(output_tokens / joules, 6)
    return out


def memory_json(query: str, values: Sequence[float | None], unit_bytes: int) -> dict[str, Any]:
    """`cost_energy.gpu_memory` of one variant: max and mean (GiB) of its query's samples in the window."""
    seen = [v * unit_bytes / 1024**3 for v in values if v is not None]
    return {
        "query": query,
        "samples": len(seen),
        "max_gib": round(max(seen), 4) if seen else None,
        "mean_gib": round(sum(seen) / len(seen), 4) if seen else None,
        "note": None if seen else "the query gave no value inside the measured window",
    }


def _cell(x: Any, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def render_cost_markdown(report: dict[str, Any]) -> list[str]:
    """The "Cost and energy" section's lines (none when no variant declares a cost, power or GPU-memory query)."""
    rows = [(v["name"], v["cost_energy"]) for v in report["variants"] if v.get("cost_energy")]
    if not rows:
        return []
    lines = [
        "",
        "## Cost and energy",
        "",
        "Over the measured window: $ / 1M tokens is the variant's price per hour over its output tokens per hour "
        "(good tokens: those of requests that met every per-request SLO); energy integrates its power query's "
        "samples (trapezoids) over the window.",
        "",
        "| variant | $/h | $ / 1M output tok | $ / 1M good tok | J / output tok | output tok / J | mean W "
        "| GPU mem max / mean (GiB) | KV cache max / mean |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for name, ce in rows:
        cost, energy, mem, kv = ce.get("cost") or {}, ce.get("energy") or {}, ce.get("gpu_memory") or {}, ce.get("kv")
        memory = "–" if not mem.get("samples") else f"{mem['max_gib']:.2f} / {mem['mean_gib']:.2f}"
        kv_cell = "–" if not kv else f"{percent(kv['max'], SHARE)} / {percent(kv['mean'], SHARE)}"
        cells = [
            usd(cost.get("usd_per_hour"), USD_PER_HOUR),
            usd(cost.get("usd_per_1m_output_tokens")),
            usd(cost.get("usd_per_1m_good_tokens")),
            _cell(energy.get("joules_per_output_token"), ",.4f"),
            _cell(energy.get("output_tokens_per_joule"), ",.3f"),
            _cell(energy.get("mean_watts"), ",.1f"),
            memory,
            kv_cell,
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
        for what, part in (("power", energy), ("GPU memory", mem)):
            if part.get("note"):
                notes.append(f"- {name}: {what}: {part['note']}")
    return [*lines, *([""] if notes else []), *notes]
