"""The Markdown of `report["comparison"]`: a table of every speedup with its interval, then per variant in words
what differs from the baseline beyond noise and what is within it."""

from __future__ import annotations

from typing import Any

from loadgen.report.numbers import AS_SET, CENSORED, counted, ms, percent, stat_ms

__all__ = ["comparison_lines", "describe", "speedup_lines"]

_LABEL = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E", "itl": "ITL"}


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}"


def _diff(v: float | None) -> str:
    """A bound of the median paired difference; None beside a numeric one: it fell among failed requests."""
    return ms(v, CENSORED, signed=True)


def _bound(e: dict[str, Any], side: str) -> str:
    return "censored" if e.get(f"ci_{side}_censored") else _x(e.get(f"ci_{side}"))


def _ci(e: dict[str, Any]) -> str:
    """The interval as 1.58–1.66; a bound that fell among failed requests is "censored" ("censored–1.04")."""
    if not _has_ci(e):
        return "–"
    return f"{_bound(e, 'low')}–{_bound(e, 'high')}"


def _has_ci(e: dict[str, Any]) -> bool:
    return any(e.get(f"ci_{side}") is not None or e.get(f"ci_{side}_censored") for side in ("low", "high"))


def _basis(e: dict[str, Any]) -> str:
    if e.get("paired"):
        return counted(e["n"], "pair")
    return f"unpaired, {e.get('source', 'samples')}, {e.get('n_baseline', 0):,} / {e.get('n_variant', 0):,} requests"


def describe(e: dict[str, Any], confidence: float) -> str:
    """One entry in words: "TPOT p50 1.62× faster (95 % CI 1.58–1.66, 812 pairs)"."""
    what = f"{_LABEL.get(e['metric'], e['metric'])} {e['stat']}"
    pct = f"{percent(confidence, AS_SET)} CI"
    if e.get("speedup") is None:
        return f"{what}: no speedup ({'censored: failed requests' if e.get('censored') else 'no data'})"
    if e.get("within_noise") is None:
        return f"{what}: {e['speedup']:.2f}×, no verdict (only {counted(e.get('tail_n', 0), 'request')} above it)"
    if e.get("within_noise"):
        return f"{what} within noise ({_ci(e)})"
    s = e["speedup"]
    way = "faster" if s >= 1 else "slower"
    ci = f"{pct} {_ci(e)}" if _has_ci(e) else "no interval"
    return f"{what} {s:.2f}× {way} ({ci}, {_basis(e)})"


_SPEEDUP_KEYS = ("ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "e2e_p50", "e2e_p99")


def speedup_lines(report: dict[str, Any]) -> list[str]:
    """The comparison's point speedups per variant (`speedup_vs_baseline`: the same numbers, one definition)."""
    censored = {
        (e["variant"], f"{e['metric']}_{e['stat']}") for e in report.get("comparison") or [] if e.get("censored")
    }
    lines = ["", f"## Speedup vs baseline `{report['baseline']}` (baseline ÷ variant; > 1 is faster)", ""]
    lines.append(
        "The comparison's speedups below: each variant's percentile against the baseline's over the requests both "
        "sent (paired when they replayed the same requests), failed requests ranking above every measured value; "
        "*censored*: the percentile falls among them."
    )
    lines += ["", "| variant | TTFT p50 | TTFT p99 | TPOT p50 | TPOT p99 | E2E p50 | E2E p99 |", "|---|" + "---:|" * 6]
    for v in report["variants"]:
        s = v["speedup_vs_baseline"]
        cells = [
            "censored" if (v["name"], k) in censored else "–" if s.get(k) is None else f"{s[k]:.2f}×"
            for k in _SPEEDUP_KEYS
        ]
        lines.append(f"| {v['name']} | {' | '.join(cells)} |")
    return lines


def comparison_lines(report: dict[str, Any]) -> list[str]:
    entries = report.get("comparison") or []
    if not entries:
        return []
    method = report.get("comparison_method") or {}
    confidence = float(method.get("confidence", 0.95))
    pct = percent(confidence, AS_SET)
    lines = [
        "",
        "## Comparison with confidence intervals (speedup = baseline ÷ variant; > 1 is faster)",
        "",
        f"{pct} percentile intervals from {method.get('resamples', '?'):,} bootstrap resamples (Poisson weights), "
        f"each seeded with {method.get('seed_rule', '?')} (scenario seed {method.get('scenario_seed', '?')}). Paired "
        "entries resample the requests both variants sent, matched by stream, index and turn; "
        "unpaired ones resample each variant on its own. A failed request ranks above every measured value "
        "(censored): a statistic among them has no speedup, and a bound among them shows as *censored* (the "
        "interval is open on that side). Within noise: the interval holds 1.0; no verdict when "
        f"fewer than {method.get('min_tail', 10)} requests lie above the statistic.",
        "",
        "| variant | vs | metric | baseline ms | variant ms | speedup | " + pct + " CI | basis | |",
        "|---|---|---|---:|---:|---:|---|---|---|",
    ]
    for e in entries:
        verdict = {True: "within noise", False: "**differs**"}.get(e.get("within_noise"), "no verdict")
        if e.get("censored"):
            verdict = "censored"
        tail = f" ({e['tail_n']} above)" if e.get("within_noise") is None and e.get("speedup") is not None else ""
        base_ms, var_ms = (stat_ms(e, k) for k in ("baseline_ms", "variant_ms"))
        lines.append(
            f"| {e['variant']} | {e['baseline']} | {_LABEL.get(e['metric'], e['metric'])} {e['stat']} "
            f"| {base_ms} | {var_ms} | {_x(e.get('speedup'))} | {_ci(e)} | {_basis(e)}{tail} | {verdict} |"
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
                f"- {e['variant']} {_LABEL.get(e['metric'], e['metric'])}: {ms(e['diff_ms'], signed=True)} ms "
                f"({pct} CI {_diff(e.get('diff_ci_low_ms'))} … {_diff(e.get('diff_ci_high_ms'))})"
                if e.get("diff_ci_low_ms") is not None or e.get("diff_ci_high_ms") is not None
                else f"- {e['variant']} {_LABEL.get(e['metric'], e['metric'])}: {ms(e['diff_ms'], signed=True)} ms"
            )
    return lines
