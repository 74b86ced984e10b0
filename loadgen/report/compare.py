"""Each variant against the baseline, with bootstrap confidence intervals: `report["comparison"]`.

For p50 and p99 of TTFT, TPOT and E2E, the speedup is the baseline's statistic over the variant's (> 1: the variant
is faster), with a percentile interval from `RESAMPLES` bootstrap resamples at `CONFIDENCE`, and `within_noise`
when the interval holds 1.0 (None, no verdict, when fewer than `MIN_TAIL` values lie above the statistic). This is
the report's one definition of a speedup: the summary's `speedup_vs_baseline` holds these same numbers
(`SPEEDUP_DEFINITION`). Which data it rests on, in order of preference (`source`):

- `pairs`: the requests both variants sent in the window, matched by identity (measure/pairs.py: stream, index,
  turn), at least `MIN_PAIRS` of them. Resampling draws pairs, so both statistics of a resample come from the same
  requests; the per-request differences also give the median paired difference (variant − baseline, p50 entries).
- `samples`: no pairs (the variants did not replay the same requests) but each variant's hash-sampled requests,
  resampled each on its own.
- `histograms`: neither (no per-request values reached the report): each variant's HDR histogram, resampled as its
  buckets' values by their counts.

In all three a failed request is a censored sample above every measured value (+inf; in TTFT when it failed before
its first token, in E2E always), as the report's percentiles count it: a variant whose stalls end as timeouts cannot
drop its worst requests from its p99. A statistic that falls among them (either variant's) has no speedup
(`censored`); an interval bound that falls among them in that share of the resamples is censored
(`ci_low_censored` / `ci_high_censored`, the bound itself null): the interval is open on that side.

Seeds: each (variant, metric) has its own generator, seeded with crc32 of "<scenario seed>/<variant>/<metric>" and
drawn from for p50, then p99 (then the median paired difference), so a report rebuilt from the same data gives the
same intervals, and one variant's do not depend on the others'.
"""

from __future__ import annotations

import zlib
from typing import Any, NamedTuple

import numpy as np

from loadgen.measure.aggregate import Aggregate, GroupStats
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.pairs import CENSORED, NO_VALUE, PAIR_CAP, PAIR_METRICS
from loadgen.metric_names import STREAM_METRICS
from loadgen.report.bootstrap import (
    FloatArray,
    IntArray,
    Sample,
    boot_paired,
    boot_quantiles,
    percentile_interval,
    quantile,
)

__all__ = [
    "COMPARE_METRICS",
    "COMPARE_STATS",
    "CONFIDENCE",
    "MIN_PAIRS",
    "MIN_TAIL",
    "RESAMPLES",
    "SPEEDUP_DEFINITION",
    "RatioInterval",
    "build_comparison",
    "comparison_method",
    "entry_seed",
    "hdr_json",
    "histogram_sample",
    "pair_ms",
    "paired_entries",
    "ratio_interval",
    "speedups_by_stat",
    "unpaired_entries",
]

COMPARE_METRICS: tuple[str, ...] = PAIR_METRICS
COMPARE_STATS: tuple[tuple[str, float], ...] = (("p50", 0.5), ("p99", 0.99))
RESAMPLES = 1000
CONFIDENCE = 0.95
# Fewer pairs than this and the comparison falls back to unpaired data: a percentile interval from a handful of
# values says little.
MIN_PAIRS = 30
# Fewer values than this above a statistic (`tail_n`: a p99 of under 1,000 requests) and its interval is given but
# judged neither way (`within_noise` None): the bootstrap of a sample's extremes is known not to hold its level (the
# resamples can never go past the largest value), and on the simulator such p99 intervals of two identical engines
# excluded 1.0 far more often than 5 % of the time.
MIN_TAIL = 10
_HDR_METRICS = ("ttft", "itl", "tpot", "e2e", "icl")  # icl: the vLLM export's itl (its std)
SPEEDUP_DEFINITION = (
    "baseline's percentile ÷ variant's over the requests both sent (paired; else each variant's sampled requests, "
    "else its histogram), failed requests censored above every measured value; a percentile among them: no speedup. "
    "The summary's speedup_vs_baseline is this number."
)


def entry_seed(seed: int, variant: str, metric: str) -> int:
    """The seed of one (variant, metric)'s generator; its entries draw from it in order: p50, p99, then the
    median paired difference."""
    return zlib.crc32(f"{seed}/{variant}/{metric}".encode())


def comparison_method(seed: int, resamples: int = RESAMPLES, confidence: float = CONFIDENCE) -> dict[str, Any]:
    """How every interval of `report["comparison"]` was made, to state beside them."""
    return {
        "bootstrap": "poisson",
        "interval": "percentile",
        "resamples": resamples,
        "confidence": confidence,
        "scenario_seed": seed,
        "seed_rule": "crc32('<scenario seed>/<variant>/<metric>'), drawn from for p50, then p99",
        "min_pairs": MIN_PAIRS,
        "min_tail": MIN_TAIL,
        "pair_cap": PAIR_CAP,
        "pairs_of": (
            "requests of the measured window, matched by (stream, index, turn); a failed one censored above every "
            "measured value (TTFT when it failed before its first token, E2E always)"
        ),
        "speedup": SPEEDUP_DEFINITION,
    }


def hdr_json(g: GroupStats) -> dict[str, str]:
    """A group's histograms, encoded (base64 HdrHistogram V2), for `loadgen compare` to resample."""
    out = {}
    for m in _HDR_METRICS:
        h = g.hists.get(m)
        if h is not None and h.count:
            out[m] = h.encode().decode("ascii")
    return out


def histogram_sample(h: LatencyHistogram | None, censored: int = 0) -> Sample:
    """A histogram's buckets (ms) as a sample, censored samples as +inf (above every value)."""
    values, counts = h.buckets_us() if h is not None else ([], [])
    v = np.asarray(values, dtype=np.float64) / 1e3
    c = np.asarray(counts, dtype=np.int64)
    if censored:
        v, c = np.append(v, np.inf), np.append(c, censored)
    return Sample.of(v, c)


def _ratio(num: FloatArray, den: FloatArray) -> FloatArray:
    """num / den, ranked as censored values rank: a censored (infinite) num over a measured den is above every ratio
    (+inf), a measured num over a censored den below every ratio (-inf, not 0, so that it stays apart from a real
    ratio), two censored values compare equal (1: tied above everything), and a zero denominator is no value."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = num / den
    r[np.isfinite(num) & np.isinf(den)] = -np.inf
    r[np.isinf(num) & np.isinf(den)] = 1.0
    r[den == 0] = np.nan
    return r


class RatioInterval(NamedTuple):
    """A percentile interval of a ratio. A censored bound (it fell among failed requests: +-inf in rank) is None
    with its flag set; `within_noise` is decided on the bounds as ranked (a censored low bound is below 1.0)."""

    low: float | None
    high: float | None
    within_noise: bool | None
    low_censored: bool = False
    high_censored: bool = False

    def fields(self) -> dict[str, Any]:
        """The JSON fields of an entry or a row."""
        return {
            "ci_low": self.low,
            "ci_high": self.high,
            "within_noise": self.within_noise,
            "ci_low_censored": self.low_censored,
            "ci_high_censored": self.high_censored,
        }


def ratio_interval(num: FloatArray, den: FloatArray, confidence: float) -> RatioInterval:
    """The interval of the bootstrap values of num / den (`_ratio`); no interval when no resample gave a value."""
    ci = percentile_interval(_ratio(num, den), confidence)
    if ci is None:
        return RatioInterval(None, None, None)
    lo, hi = ci
    return RatioInterval(_round(lo), _round(hi), bool(lo <= 1.0 <= hi), bool(np.isinf(lo)), bool(np.isinf(hi)))


def _round(x: float) -> float | None:
    return None if not np.isfinite(x) else round(float(x), 4)


def _point(x: float | None) -> float | None:
    """A statistic in ms; None when there is none or it is censored."""
    return None if x is None else _round(x)


def _common(agg: Aggregate, base: str, variant: str) -> tuple[IntArray, IntArray]:
    """Rows of the baseline's and of the variant's samples that hold the same requests, row for row."""
    keys_b = np.frombuffer(agg.pairs.samples(base)[0], dtype=np.int64)
    keys_v = np.frombuffer(agg.pairs.samples(variant)[0], dtype=np.int64)
    _, ib, iv = np.intersect1d(keys_b, keys_v, return_indices=True)
    return ib, iv


def pair_ms(us: IntArray) -> FloatArray:
    """Pair samples (µs) in ms, a censored one (a failed request, a failed or cut session) +inf."""
    out = us / 1e3
    out[us == CENSORED] = np.inf
    return out


def _paired_values(
    agg: Aggregate, base: str, variant: str, rows: tuple[IntArray, IntArray], metric: str
) -> tuple[FloatArray, FloatArray]:
    """The metric (ms) of the requests both variants sent, pair by pair (+inf: censored); a request either variant
    has no value of (TPOT of a one-chunk reply, or of a failed request) is left out."""
    a = np.frombuffer(agg.pairs.samples(base)[1][metric], dtype=np.int64)[rows[0]]
    b = np.frombuffer(agg.pairs.samples(variant)[1][metric], dtype=np.int64)[rows[1]]
    keep = (a != NO_VALUE) & (b != NO_VALUE)
    return pair_ms(a[keep]), pair_ms(b[keep])


def _sample_values(agg: Aggregate, variant: str, metric: str) -> FloatArray:
    _, values = agg.pairs.samples(variant)
    v = np.frombuffer(values[metric], dtype=np.int64)
    return pair_ms(v[v != NO_VALUE])


def _censored_point(out: dict[str, Any], pa: float | None, pb: float | None) -> bool:
    """When either statistic is missing or falls among failed requests: no speedup and no interval, `censored`
    saying which. True when it did."""
    if pa is not None and pb is not None and np.isfinite(pa) and np.isfinite(pb) and pb > 0:
        return False
    out |= {"speedup": None, **RatioInterval(None, None, None).fields()}
    out["censored"] = pa is not None and pb is not None and not (np.isfinite(pa) and np.isfinite(pb))
    return True


def _entry(variant: str, baseline: str, metric: str, stat: str) -> dict[str, Any]:
    return {"variant": variant, "baseline": baseline, "metric": metric, "stat": stat}


def paired_entries(
    entries: list[dict[str, Any]], a: FloatArray, b: FloatArray, resamples: int, confidence: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    sa, sb = Sample.sorted_of(a), Sample.sorted_of(b)
    boots = boot_paired(a, b, [q for _, q in COMPARE_STATS], resamples, rng)
    for out, (_, q), (qa, qb) in zip(entries, COMPARE_STATS, boots, strict=True):
        pa, pb = quantile(sa, q), quantile(sb, q)
        out |= {"paired": True, "source": "pairs", "n": len(a), "tail_n": int(len(a) * (1.0 - q))}
        out |= {"baseline_ms": _point(pa), "variant_ms": _point(pb)}
        if _censored_point(out, pa, pb):
            continue
        assert pa is not None and pb is not None
        out |= {"speedup": _round(pa / pb), "censored": False, **ratio_interval(qa, qb, confidence).fields()}
        if out["tail_n"] < MIN_TAIL:
            out["within_noise"] = None
    # The per-request view, on the p50 entry: how much later (ms) the variant's copy of a request came, at the median;
    # a request only one variant failed is later (or earlier) than every measured difference, one both failed ties.
    with np.errstate(invalid="ignore"):
        diffs = b - a
    diffs[np.isinf(a) & np.isinf(b)] = 0.0
    ds = Sample.sorted_of(diffs)
    med, dci = quantile(ds, 0.5), percentile_interval(boot_quantiles(ds, 0.5, resamples, rng), confidence)
    p50 = next(e for e, (stat, _) in zip(entries, COMPARE_STATS, strict=True) if stat == "p50")
    p50["diff_ms"] = _round(med) if med is not None else None
    p50["diff_ci_low_ms"], p50["diff_ci_high_ms"] = (_round(dci[0]), _round(dci[1])) if dci else (None, None)


def unpaired_entries(
    entries: list[dict[str, Any]], sa: Sample, sb: Sample, source: str, resamples: int, confidence: float, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    for out, (_, q) in zip(entries, COMPARE_STATS, strict=True):
        pa, pb = quantile(sa, q), quantile(sb, q)
        out |= {"paired": False, "source": source, "n": min(sa.total, sb.total)}
        out |= {"n_baseline": sa.total, "n_variant": sb.total, "tail_n": int(min(sa.total, sb.total) * (1.0 - q))}
        out |= {"baseline_ms": _point(pa), "variant_ms": _point(pb)}
        if _censored_point(out, pa, pb):
            continue  # no data, or the statistic falls among failed requests: no speedup to put an interval on
        assert pa is not None and pb is not None
        qa = boot_quantiles(sa, q, resamples, rng)
        qb = boot_quantiles(sb, q, resamples, rng)
        out |= {"speedup": _round(pa / pb), "censored": False, **ratio_interval(qa, qb, confidence).fields()}
        if out["tail_n"] < MIN_TAIL:
            out["within_noise"] = None


def build_comparison(
    agg: Aggregate,
    variants: list[str],
    baseline: str,
    seed: int,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
    whole: set[str] | frozenset[str] = frozenset(),
) -> list[dict[str, Any]]:
    """One entry per (non-baseline variant, metric, stat), in the variants' order. `whole`: the variants whose
    replies came whole (`stream: false`): their pairs have E2E entries only (no TTFT or TPOT was measured)."""
    out: list[dict[str, Any]] = []
    base_group = agg.merged_variant(baseline)
    for v in variants:
        if v == baseline:
            continue
        group = agg.merged_variant(v)
        rows = _common(agg, baseline, v)
        for metric in COMPARE_METRICS:
            if metric in STREAM_METRICS and (v in whole or baseline in whole):
                continue
            a, b = _paired_values(agg, baseline, v, rows, metric)
            samples: tuple[Sample, Sample, str] | None = None
            if len(a) < MIN_PAIRS:
                sa, sb = _sample_values(agg, baseline, metric), _sample_values(agg, v, metric)
                if min(len(sa), len(sb)) >= MIN_PAIRS:
                    samples = Sample.of(sa), Sample.of(sb), "samples"
                else:
                    samples = (
                        histogram_sample(base_group.hists.get(metric), base_group.censored.get(metric, 0)),
                        histogram_sample(group.hists.get(metric), group.censored.get(metric, 0)),
                        "histograms",
                    )
            entries = [_entry(v, baseline, metric, stat) for stat, _ in COMPARE_STATS]
            seed_vm = entry_seed(seed, v, metric)
            if samples is None:
                paired_entries(entries, a, b, resamples, confidence, seed_vm)
            else:
                unpaired_entries(entries, samples[0], samples[1], samples[2], resamples, confidence, seed_vm)
            for e in entries:
                e |= {"resamples": resamples, "confidence": confidence, "seed": seed_vm}
            out += entries
    return out


def speedups_by_stat(comparison: list[dict[str, Any]], variant: str) -> dict[str, float | None]:
    """`{metric}_{stat}` -> the comparison's speedup of `variant` (None: censored or no data): the summary's
    `speedup_vs_baseline`, so that a report has one definition of a speedup."""
    return {f"{e['metric']}_{e['stat']}": e["speedup"] for e in comparison if e["variant"] == variant}
