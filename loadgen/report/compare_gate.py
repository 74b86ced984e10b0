"""The regression gate between two reports (`loadgen compare BASE.json NEW.json --max-regression 5%`, the command in
loadgen/cli/compare.py).

Per variant (matched by name) and metric — p50 / p99 of TTFT, TPOT and E2E, and throughput (successful requests/s,
output tokens/s) — the change NEW vs BASE with a bootstrap interval of the ratio NEW ÷ BASE. The two runs share no
requests, so the intervals are unpaired: each report's latency histograms (`variants[].overall.hdr`, failed requests
as censored samples above every value) are resampled by their buckets' counts; throughput resamples the bins of
each variant's timeline (interior bins, the first and last of the window being partial) by the circular block
bootstrap (per-second counts are autocorrelated: blocks of the length Politis & White's rule gives, `block_bins`)
and scales the ratio of means to the reports' own rates. A bound that falls among failed requests (NEW's p99 is
censored in that share of the resamples) is `censored`: the interval is open on that side, and the verdict stands
on the other bound.

A change is a regression when it is worse than the threshold (latency up, throughput down, by more than
--max-regression) AND outside noise (its interval excludes no change). A variant of BASE missing in NEW, or a
metric BASE measured that NEW did not (no successful request), is a regression; a statistic censored in NEW and not
in BASE (failed requests rank above it) too. A variant only in NEW is listed, never a regression. Exit 0: no
regression; 1: a regression; 3: either run's load generator was not trustworthy (its latencies may be its own, so
no verdict); 4: either run failed, or a report cannot be read whole (no verdict); 2: bad input, naming the file. A
p99 of fewer than 1,000 requests in either report (under 10 above it) gets its interval but no verdict, as in the
report's comparison.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from loadgen.exit_codes import ExitCode
from loadgen.measure.histogram import LatencyHistogram
from loadgen.report.bootstrap import FloatArray, Sample, block_length, boot_block_means, boot_quantiles, quantile
from loadgen.report.compare import (
    COMPARE_METRICS,
    COMPARE_STATS,
    CONFIDENCE,
    MIN_TAIL,
    RESAMPLES,
    entry_seed,
    histogram_sample,
    ratio_interval,
)
from loadgen.report.compare_cost import cost_row
from loadgen.report.compare_rows import blank_row
from loadgen.report.numbers import (
    AS_SET,
    CENSORED,
    CHANGE,
    LATENCY_MS,
    REQ_PER_S,
    TOK_PER_S,
    USD_PER_1M_TOKENS,
    counted,
    figure,
    percent,
)
from loadgen.report.report_file import ReportFileError, incomplete, read_report_file

__all__ = ["CompareInputError", "compare_reports", "load_compare_input", "render_compare"]

_THROUGHPUT = (("requests_per_s", "ok", "req/s"), ("output_tokens_per_s", "output_tokens_per_s", "output tok/s"))
_LABEL = {"ttft": "TTFT", "tpot": "TPOT", "e2e": "E2E"}


class CompareInputError(ReportFileError):
    """A file compare cannot use; the message names it, `exit_code` says whether it is usage (2) or no verdict (4):
    loadgen/report/report_file.py."""


def load_compare_input(path: Path) -> dict[str, Any]:
    doc = read_report_file(path, CompareInputError)
    try:
        for v in doc["variants"]:
            if not isinstance(v["name"], str) or not isinstance(v["overall"]["metrics_ms"], dict):
                raise TypeError
        for blob in (b for v in doc["variants"] for b in v["overall"].get("hdr", {}).values()):
            LatencyHistogram.decode(blob)
    except (KeyError, TypeError, ValueError):
        raise incomplete(path, CompareInputError, "variants, their overall numbers") from None
    return doc


def _hist_sample(variant: dict[str, Any], metric: str) -> tuple[Sample | None, bool]:
    """(the metric's histogram as a sample, None without one; whether the report measured the metric at all)."""
    overall = variant["overall"]
    summary = overall["metrics_ms"].get(metric)
    blob = overall.get("hdr", {}).get(metric)
    censored = int((summary or {}).get("censored") or 0)
    has = bool(summary and (summary.get("count") or censored))
    if blob is None and not censored:
        return None, has
    return histogram_sample(LatencyHistogram.decode(blob) if blob else None, censored), has


def _verdict(row: dict[str, Any], lower_is_better: bool, threshold: float) -> None:
    ratio = row["ratio"]
    if ratio is None:
        return
    worse = ratio > 1 + threshold if lower_is_better else ratio < 1 - threshold
    better = ratio < 1 / (1 + threshold) if lower_is_better else ratio > 1 + threshold
    if row["within_noise"]:
        row["verdict"] = "within noise"
    elif worse:
        row["verdict"] = "regression" if row["within_noise"] is False else "regression (no interval)"
        row["regression"] = True
    elif better and row["within_noise"] is False:
        row["verdict"] = "improvement"
    else:
        row["verdict"] = "within threshold"


def _latency_rows(
    name: str, b: dict[str, Any], n: dict[str, Any], threshold: float, resamples: int, seed: int
) -> list[dict[str, Any]]:
    rows = []
    for metric in COMPARE_METRICS:
        sb, has_b = _hist_sample(b, metric)
        sn, has_n = _hist_sample(n, metric)
        rng = np.random.default_rng(entry_seed(seed, name, metric))
        for stat, q in COMPARE_STATS:
            row = blank_row(name, f"{metric}_{stat}", "latency") | {"base_censored": False, "new_censored": False}
            if not has_b:
                row["verdict"] = "not in BASE"
                rows.append(row)
                continue
            if not has_n or sn is None:
                row |= {"verdict": "missing in NEW (no successful request)", "regression": True}
                rows.append(row)
                continue
            if sb is None:
                row["verdict"] = "BASE has no histogram"
                rows.append(row)
                continue
            pb, pn = quantile(sb, q), quantile(sn, q)
            row["base"] = None if pb is None or not np.isfinite(pb) else round(pb, 4)
            row["new"] = None if pn is None or not np.isfinite(pn) else round(pn, 4)
            row["base_censored"], row["new_censored"] = pb is not None and row["base"] is None, row["new"] is None
            if row["new"] is None and row["base"] is not None:
                row |= {"verdict": "censored in NEW (failed requests rank above it)", "regression": True}
            elif row["base"] is None:
                row["verdict"] = "censored in BASE" if row["new"] is not None else "censored in both"
            elif pb and pn is not None:
                qb = boot_quantiles(sb, q, resamples, rng)
                qn = boot_quantiles(sn, q, resamples, rng)
                row |= {"ratio": round(pn / pb, 4), "change": round(pn / pb - 1, 4)}
                row |= ratio_interval(qn, qb, CONFIDENCE).fields()
                tail = int(min(sb.total, sn.total) * (1.0 - q))
                if tail < MIN_TAIL:
                    # An interval that rests on a few values above the statistic is no ground for a verdict.
                    verdict = f"no verdict (only {counted(tail, 'request')} above {stat})"
                    row |= {"within_noise": None, "verdict": verdict}
                else:
                    _verdict(row, True, threshold)
            rows.append(row)
    return rows


def _interior(values: list[Any]) -> FloatArray:
    """A timeline column's bins inside the window: from the first to the last non-empty one, both left out (a bin
    the window starts or ends in is partial)."""
    v = np.asarray([x or 0 for x in values], dtype=np.float64)
    nz = np.flatnonzero(v)
    if len(nz) < 5:
        return v[:0]
    return v[nz[0] + 1 : nz[-1]]


def _throughput_rows(
    name: str, b: dict[str, Any], n: dict[str, Any], threshold: float, resamples: int, seed: int
) -> list[dict[str, Any]]:
    rows = []
    for key, column, _ in _THROUGHPUT:
        vb, vn = b["overall"].get(key), n["overall"].get(key)
        row = blank_row(name, key, "throughput", vb, vn)
        if not vb:
            row["verdict"] = "none in BASE"
        elif vn is None:
            row |= {"verdict": "missing in NEW", "regression": True}
        else:
            point = vn / vb
            row |= {"ratio": round(point, 4), "change": round(point - 1, 4)}
            bins_b = _interior((b.get("timeline") or {}).get(column) or [])
            bins_n = _interior((n.get("timeline") or {}).get(column) or [])
            if len(bins_b) and len(bins_n) and bins_b.mean() > 0 and bins_n.mean() > 0:
                rng = np.random.default_rng(entry_seed(seed, name, key))
                blocks = block_length(bins_b), block_length(bins_n)
                mb = boot_block_means(bins_b, resamples, rng, blocks[0])
                mn = boot_block_means(bins_n, resamples, rng, blocks[1])
                scale = point / (bins_n.mean() / bins_b.mean())
                row |= ratio_interval(mn * scale, mb, CONFIDENCE).fields()
                row["block_bins"] = list(blocks)
            _verdict(row, False, threshold)
        rows.append(row)
    return rows


def compare_reports(
    base: dict[str, Any],
    new: dict[str, Any],
    max_regression: float,
    resamples: int = RESAMPLES,
    seed: int | None = None,
) -> dict[str, Any]:
    seed = int(base.get("seed", 0)) if seed is None else seed
    new_by_name = {v["name"]: v for v in new["variants"]}
    rows: list[dict[str, Any]] = []
    for b in base["variants"]:
        n = new_by_name.get(b["name"])
        if n is None:
            rows.append({"variant": b["name"], "metric": "*", "kind": "variant", "regression": True,
                         "verdict": "missing in NEW"})  # fmt: skip
            continue
        rows += _latency_rows(b["name"], b, n, max_regression, resamples, seed)
        throughput = _throughput_rows(b["name"], b, n, max_regression, resamples, seed)
        rows += throughput
        cost = cost_row(b["name"], b, n, throughput[-1])  # from the output tokens/s row: $/1M = $/h ÷ tokens/h
        if cost is not None:
            _verdict(cost, True, max_regression)
            rows.append(cost)
    base_names = {v["name"] for v in base["variants"]}
    for name in new_by_name.keys() - base_names:
        rows.append({"variant": name, "metric": "*", "kind": "variant", "regression": False, "verdict": "new in NEW"})
    runs = (("BASE", base.get("run", {})), ("NEW", new.get("run", {})))
    failed = [f"{which}: {r}" for which, run in runs for r in (run.get("failed") or [])]
    untrusted = [f"{which}: {r}" for which, run in runs for r in (run.get("untrustworthy_reasons") or [])]
    regressions = sum(1 for r in rows if r["regression"])
    # No verdict from a failed run (4), nor from a load generator that was not trustworthy (3).
    code = ExitCode.RUN_FAILED if failed else ExitCode.UNTRUSTWORTHY if untrusted else ExitCode.OK
    if code == ExitCode.OK and regressions:
        code = ExitCode.SLO_BREACHED
    return {
        "max_regression": max_regression,
        "method": {
            "bootstrap": (
                "poisson, unpaired (histogram buckets by their counts); throughput: circular block bootstrap of the "
                "timeline's interior bins, block length by Politis & White (2004, corrected 2009); $ / 1M output "
                "tokens: the output tokens/s interval inverted, scaled by the ratio of the declared prices"
            ),
            "interval": "percentile",
            "resamples": resamples,
            "confidence": CONFIDENCE,
            "seed": seed,
            "seed_rule": "crc32('<seed>/<variant>/<metric>'), drawn from for p50, then p99",
        },
        "rows": rows,
        "regressions": regressions,
        "untrustworthy": untrusted,
        "failed": failed,
        "exit_code": int(code),
    }


# Decimals of a row's BASE and NEW by what they are (report/numbers.py's kinds): by kind, throughput by metric.
_DECIMALS = {
    "latency": LATENCY_MS,
    "cost": USD_PER_1M_TOKENS,
    "requests_per_s": REQ_PER_S,
    "output_tokens_per_s": TOK_PER_S,
}


def _num(r: dict[str, Any], side: str) -> str:
    if r.get(f"{side}_censored"):
        return CENSORED
    x = r.get(side)  # a measured figure, though the JSON may hold a whole one
    return figure(float(x) if isinstance(x, int) else x, _DECIMALS.get(r["kind"], _DECIMALS.get(r["metric"], 2)))


def _ci(r: dict[str, Any]) -> str:
    """The interval as 0.981–1.040; a bound that fell among failed requests is "censored"."""
    lo, hi = r.get("ci_low"), r.get("ci_high")
    if lo is None and hi is None and not (r.get("ci_low_censored") or r.get("ci_high_censored")):
        return "–"
    low = "censored" if r.get("ci_low_censored") else "–" if lo is None else f"{lo:.3f}"
    high = "censored" if r.get("ci_high_censored") else "–" if hi is None else f"{hi:.3f}"
    return f"{low}–{high}"


def render_compare(result: dict[str, Any], base_path: str, new_path: str) -> str:
    m = result["method"]
    lines = [
        f"# loadgen compare — {new_path} vs {base_path}",
        "",
        f"Regression: worse by more than {percent(result['max_regression'], AS_SET)} and outside noise. Intervals: "
        f"{percent(m['confidence'], AS_SET)} percentile, {m['resamples']:,} unpaired bootstrap resamples, "
        f"seed {m['seed']}.",
        "",
        "| variant | metric | BASE | NEW | change | CI of NEW ÷ BASE | verdict |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    for r in result["rows"]:
        metric = r["metric"]
        if r["kind"] == "latency":
            name, _, stat = metric.rpartition("_")
            metric = f"{_LABEL.get(name, name)} {stat} (ms)"
        elif r["kind"] == "throughput":
            metric = next(label for key, _, label in _THROUGHPUT if key == r["metric"])
        elif r["kind"] == "cost":
            metric = "$ / 1M output tok"
        verdict = f"**{r['verdict']}**" if r["regression"] else r["verdict"]
        change = percent(r.get("change"), CHANGE, signed=True)
        lines.append(
            f"| {r['variant']} | {metric} | {_num(r, 'base')} | {_num(r, 'new')} | {change} | {_ci(r)} | {verdict} |"
        )
    lines.append("")
    if any(r.get(k) for r in result["rows"] for k in ("ci_low_censored", "ci_high_censored", "new_censored")):
        lines += [
            "censored: the bound falls among failed requests (they rank above every measured value), so the interval "
            "is open on that side; a censored percentile has no value.",
            "",
        ]
    for f in result.get("failed", []):
        lines.append(f"- ✖ run failed, no verdict — {f}")
    for u in result["untrustworthy"]:
        lines.append(f"- ⚠ not trustworthy — {u}")
    n = result["regressions"]
    lines.append(f"{n} regression{'s' if n != 1 else ''} · exit code {result['exit_code']}")
    return "\n".join(lines) + "\n"
