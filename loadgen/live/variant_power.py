"""Each variant's power and GPU memory over the measured window, read from the cluster Prometheus
(`metrics.prometheus`) with the variant's own queries (`variants[].power`, `variants[].gpu_memory`), into the
report's `variants[].cost_energy` (report/cost.py computes the figures and says how).

A query should give one series (sum the variant's GPUs in it); when it gives several, they are summed point by point
and the report says so. Like the cluster metrics, nothing here raises: what fails is the part's note.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loadgen.config.cost import MEMORY_UNITS
from loadgen.config.live_metrics import ClusterPrometheus
from loadgen.config.variant import Variant
from loadgen.live.cluster_metrics import PrometheusError, range_series
from loadgen.report.cost import energy_json, memory_json

__all__ = ["kv_usage", "variant_power"]


def _one_series(series: list[dict[str, Any]]) -> tuple[list[float], list[float | None], str | None]:
    """(times, values, note): several series summed where all have a value (a point missing in one is a gap)."""
    if not series:
        return [], [], None
    if len(series) == 1:
        return series[0]["t_unix_s"], series[0]["values"], None
    by_t: dict[float, list[float | None]] = {}
    for s in series:
        for t, v in zip(s["t_unix_s"], s["values"], strict=True):
            by_t.setdefault(t, []).append(v)
    ts = sorted(by_t)
    values = [
        None if len(by_t[t]) < len(series) or None in by_t[t] else sum(v for v in by_t[t] if v is not None) for t in ts
    ]
    return ts, values, f"the query gave {len(series)} series: summed"


def _read(
    cfg: ClusterPrometheus, query: str, start: float, end: float, environ: Mapping[str, str] | None
) -> tuple[list[float], list[float | None], str | None]:
    try:
        return _one_series(range_series(cfg, query, start, end, environ))
    except PrometheusError as e:
        return [], [], str(e) if e.kind == "unreachable" else f"Prometheus answered {e.kind}: {e}"


def variant_power(
    cfg: ClusterPrometheus,
    variant: Variant,
    start: float,
    end: float,
    output_tokens: int,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`{"energy": …, "gpu_memory": …}` of `variant` over the window [start, end] (unix seconds), for the parts
    it declares."""
    out: dict[str, Any] = {}
    if variant.power is not None:
        t, w, note = _read(cfg, variant.power.query, start, end, environ)
        out["energy"] = energy_json(variant.power.query, t, w, start, end, output_tokens)
        if note is not None:
            out["energy"]["note"] = note if out["energy"]["note"] is None else f"{note}; {out['energy']['note']}"
    if variant.gpu_memory is not None:
        t, m, note = _read(cfg, variant.gpu_memory.query, start, end, environ)
        inside = [v for ti, v in zip(t, m, strict=True) if start <= ti <= end]
        out["gpu_memory"] = memory_json(variant.gpu_memory.query, inside, MEMORY_UNITS[variant.gpu_memory.unit])
        if note is not None:
            prior = out["gpu_memory"]["note"]
            out["gpu_memory"]["note"] = note if prior is None else f"{note}; {prior}"
    return out


def kv_usage(server_metrics: dict[str, Any] | None, start: float, end: float) -> dict[str, float] | None:
    """The server's own KV-cache use (0–1) over the window from its scraped /metrics (`server_metrics`): the max and
    mean of the samples inside it (of the per-pod max where pods were scraped apart). None without one."""
    if not server_metrics:
        return None
    series = server_metrics.get("series") or {}
    values = series.get("kv_usage_max") or series.get("kv_usage")
    ts = server_metrics.get("t_unix_s") or []
    if not values:
        return None
    inside = [v for t, v in zip(ts, values, strict=False) if v is not None and start <= t <= end]
    if not inside:
        return None
    return {"max": round(max(inside), 4), "mean": round(sum(inside) / len(inside), 4)}
