"""The Markdown of `report["comparison"]`: a table of every speedup with its interval, then per variant in words
what differs from the baseline beyond noise and what is within it."""

from __future__ import annotations

from typing import Any

__all__ = ["comparison_lines", "describe"]

_LABEL = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E", "itl": "ITL"}


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def _ci(e: dict[str, Any]) -> str:
    return "–" if e.get("ci_low") is None else f"{_x(e['ci_low'])}–{_x(e['ci_high'])}"


def _basis(e: dict[str, Any]) -> str:
    if e.get("paired"):
        return f"{e['n']:,} pairs"
    return f"unpaired, {e.get('source', 'samples')}, {e.get('n_baseline', 0):,} / {e.get('n_variant', 0):,} requests"


def describe(e: dict[str, Any], confidence: float) -> str:
    """One entry in words: "TPOT p50 1.62× faster (95 % CI 1.58–1.66, 812 pairs)"."""
    what = f"{_LABEL.get(e['metric'], e['metric'])} {e['stat']}"
    pct = f"{100 * confidence:g} % CI"
    if e.get("speedup") is None:
        return f"{what}: no speedup ({'censored: failed requests' if e.get('censored') else 'no data'})"
    if e.get("within_noise") is None:
        return f"{what}: {e['speedup']:.2f}×, no verdict (only {e.get('tail_n', 0)} requests above it)"
    if e.get("within_noise"):
        return f"{what} within noise ({_ci(e)})"
    s = e["speedup"]
    way = "faster" if s >= 1 else "slower"
    ci = f"{pct} {_ci(e)}" if e.get("ci_low") is not None else "no interval"
    return f"{what} {s:.2f}× {way} ({ci}, {_basis(e)})"


def comparison_lines(report: dict[str, Any]) -> list[str]:
    entries = report.get("comparison") or []
    if not entries:
        return []
    method = report.get("comparison_method") or {}
    confidence = float(method.get("confidence", 0.95))
    pct = f"{100 * confidence:g} %"
    lines = [
        "",
        "## Comparison with confidence intervals (speedup = baseline ÷ variant; > 1 is faster)",
        "",
        f"{pct} percentile intervals from {method.get('resamples', '?'):,} bootstrap resamples (Poisson weights), "
        f"each seeded with {method.get('seed_rule', '?')} (scenario seed {method.get('scenario_seed', '?')}). Paired "
        "entries resample the requests both variants served successfully, matched by stream, index and turn; "
        "unpaired ones resample each variant on its own. Within noise: the interval holds 1.0; no verdict when "
        f"fewer than {method.get('min_tail', 10)} requests lie above the statistic.",
        "",
        "| variant | vs | metric | baseline ms | variant ms | speedup | " + pct + " CI | basis | |",
        "|---|---|---|---:|---:|---:|---|---|---|",
    ]
    for e in entries:
        verdict = {True: "within noise", False: "**differs**"}.get(e.get("within_noise"), "no verdict")
        tail = f" ({e['tail_n']} above)" if e.get("within_noise") is None and e.get("speedup") is not None else ""
        lines.append(
            f"| {e['variant']} | {e['baseline']} | {_LABEL.get(e['metric'], e['metric'])} {e['stat']} "
            f"| {_x(e.get('baseline_ms'))} | {_x(e.get('variant_ms'))} | {_x(e.get('speedup'))} | {_ci(e)} "
            f"| {_basis(e)}{tail} | {verdict} |"
        )
    lines.append("")
    by_variant: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        by_variant.setdefault(e["variant"], []).append(e)
    for variant, es in by_variant.items():
        differs = [describe(e, confidence) for e in es if e.get("within_noise") is False]
        noise = [describe(e, confidence) for e in es if e.get("within_noise")]
        missing = [describe(e, confidence) for e in es if e.get("within_noise") is None]
        text = "; ".join(differs) if differs else "no difference beyond noise"
        line = f"- **{variant}** vs {es[0]['baseline']}: {text}."
        if noise:
            line += " Within noise: " + "; ".join(n.replace(" within noise", "") for n in noise) + "."
        if missing:
            line += " " + "; ".join(missing) + "."
        lines.append(line)
    diffs = [e for e in entries if e.get("diff_ms") is not None]
    if diffs:
        lines += ["", "Median per-request difference (variant − baseline, ms, paired):"]
        for e in diffs:
            lines.append(
                f"- {e['variant']} {_LABEL.get(e['metric'], e['metric'])}: {e['diff_ms']:+.2f} ms "
                f"({pct} CI {e['diff_ci_low_ms']:+.2f} … {e['diff_ci_high_ms']:+.2f})"
                if e.get("diff_ci_low_ms") is not None
                else f"- {e['variant']} {_LABEL.get(e['metric'], e['metric'])}: {e['diff_ms']:+.2f} ms"
            )
    return lines
