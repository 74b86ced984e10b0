"""Bootstrap distributions of quantiles, for confidence intervals of speedups: paired (the two quantiles of each
resample come from the same resampled pairs) and unpaired (each sample resampled on its own; a histogram is a sample
of its buckets' values, each with its count).

Quantiles are the inverted CDF: the smallest value whose cumulative weight reaches rank ceil(q * total).

The resampling is the Poisson bootstrap: every element gets an independent Poisson(1) weight (a bucket of count c a
Poisson(c) one) instead of a multinomial draw of exactly n. Its distribution is asymptotically the multinomial
bootstrap's (Hanley & MacGibbon 2006, Chamandy et al. 2012), and it can be drawn without a weight per element:

- one sample's quantile (`boot_quantiles`) exactly, from the resample's total and one Beta draw (see there);
- a pair's two quantiles (`boot_paired`) depend only on the elements whose ranks, in either order, are near the
  quantile's rank: the elements more than 4 standard deviations of the resampled rank below or above it in both
  orders are drawn as one Poisson sum per cell (below / above in a x below / above in b: four cells). A resample is
  then ~sqrt(n) weights instead of n (1,000 resamples of 50,000 pairs: ~20 ms, not seconds). When a resample's
  quantile falls outside its window (about one in 10^4), its cells' sums are spread over their elements (given the
  sum, independent Poissons are multinomial over them), so that resample is exactly what a full draw would have been.

Failed requests are censored samples, +inf: above every measured value and tied with each other, as the report's
percentiles rank them. Everything here is rank-based (sorts, cumulative counts, order statistics), so an infinite
value is just the largest rank, never arithmetic: a resample's quantile that falls among them is +inf, and
`percentile_interval` gives a bound there as ±inf for the caller to report as censored, never NaN.

A timeline's bins (throughput per second) are autocorrelated, so their mean is resampled by the circular block
bootstrap (`boot_block_means`, Politis & Romano 1992) with the automatic block length of Politis & White (2004, as
corrected by Patton, Politis & White 2009; `block_length`): resampling single bins as independent makes the
interval of a mean too narrow by the factor sqrt(long-run variance / variance), ~1.7 for an AR(1) of 0.5.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = [
    "FloatArray",
    "IntArray",
    "Sample",
    "block_length",
    "boot_block_means",
    "boot_paired",
    "boot_quantiles",
    "percentile_interval",
    "quantile",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
# Resamples drawn per block: bounds the weight matrix (block x window) whatever the number of resamples.
_BLOCK = 250
# Half-width of a window, in standard deviations of the resampled rank: at 3, a pair's quantile leaves its window in
# about one resample in 200, which is then completed exactly (see the module's note, O(n) for it): the best trade
# between fewer weights per resample and more completions (1,000 resamples of 40,000 pairs: 32 ms at 3, 46 at 4).
_SDS = 3.0


class Sample:
    """Values sorted ascending with their counts (ties merged)."""

    __slots__ = ("values", "counts", "cum")

    def __init__(self, values: FloatArray, counts: IntArray) -> None:
        self.values = values
        self.counts = counts
        self.cum = np.cumsum(counts)

    @classmethod
    def of(cls, values: npt.ArrayLike, counts: npt.ArrayLike | None = None) -> Sample:
        v = np.asarray(values, dtype=np.float64)
        if counts is None:
            u, c = np.unique(v, return_counts=True)
            return cls(u, c.astype(np.int64))
        c = np.asarray(counts, dtype=np.int64)
        keep = c > 0
        order = np.argsort(v[keep], kind="stable")
        return cls(v[keep][order], c[keep][order])

    @classmethod
    def sorted_of(cls, values: FloatArray) -> Sample:
        """One element per value (ties kept apart): a sort, without `np.unique`'s extra passes."""
        v = np.sort(np.asarray(values, dtype=np.float64))
        return cls(v, np.ones(len(v), dtype=np.int64))

    @property
    def total(self) -> int:
        return int(self.cum[-1]) if len(self.cum) else 0


@functools.cache
def _poisson1_table() -> npt.NDArray[np.int32]:
    """Poisson(1)'s inverse CDF at the midpoints of 65,536 equal slices of (0, 1): a 16-bit uniform indexes it.
    Each probability is within 2**-16 of Poisson(1)'s (mean 1 exactly, variance 0.99997)."""
    cdf = np.cumsum([math.exp(-1.0) / math.factorial(k) for k in range(16)])
    return np.searchsorted(cdf, (np.arange(65536) + 0.5) / 65536, side="right").astype(np.int32)


def _poisson1(rng: np.random.Generator, shape: tuple[int, int]) -> npt.NDArray[np.int32]:
    """Poisson(1) weights through `_poisson1_table`: ~3x faster than `Generator.poisson` (one random byte pair and
    one lookup per weight), which is most of a paired resample's cost."""
    u = np.frombuffer(rng.bytes(2 * shape[0] * shape[1]), dtype=np.uint16).reshape(shape)
    return _poisson1_table()[u]


def _rank(q: float, total: npt.ArrayLike) -> IntArray:
    # The tolerance keeps q * total that is an integer in exact arithmetic (0.99 * 100) from rounding up past it.
    return np.maximum(np.ceil(q * np.asarray(total, dtype=np.float64) - 1e-9), 1).astype(np.int64)


def quantile(sample: Sample, q: float) -> float | None:
    if not sample.total:
        return None
    r = int(_rank(q, sample.total))
    return float(sample.values[int(np.searchsorted(sample.cum, r, side="left"))])


def _half_window(total: int, q: float) -> float:
    return _SDS * math.sqrt(total * q * (1.0 - q)) + 8.0


def boot_quantiles(sample: Sample, q: float, resamples: int, rng: np.random.Generator) -> FloatArray:
    """`resamples` Poisson-bootstrap values of the q-quantile (NaN for a resample that drew nothing), drawn exactly
    and without drawing any weight: Poisson(count) weights per value are the events of a unit-rate Poisson process on
    (0, total] falling in each value's stretch of it, so a resample's total is Poisson(total) and, given that total
    T, its r-th event (r = ceil(q x T)) lies at total x Beta(r, T - r + 1); the quantile is the value owning it."""
    n = sample.total
    out = np.full(resamples, np.nan)
    if not n:
        return out
    t = rng.poisson(n, resamples)
    drew = t > 0
    r = _rank(q, t[drew])
    at = n * rng.beta(r, t[drew] - r + 1)
    out[drew] = sample.values[np.minimum(np.searchsorted(sample.cum, at, side="left"), len(sample.values) - 1)]
    return out


def _window(n: int, q: float) -> tuple[int, int]:
    """Positions [lo, hi) of the sorted order whose ranks (position + 1) lie within the window around q * n."""
    r0, half = q * n, _half_window(n, q)
    return max(math.ceil(r0 - half) - 1, 0), min(math.floor(r0 + half) + 1, n)


def boot_paired(
    a: FloatArray, b: FloatArray, qs: Sequence[float], resamples: int, rng: np.random.Generator
) -> list[tuple[FloatArray, FloatArray]]:
    """For each q of `qs`: bootstrap values of the q-quantiles of `a` and of `b`, pair i being (a[i], b[i]), so
    resample k's two values come from the same resampled pairs. The sort orders are shared by the qs; each q has
    resamples of its own."""
    n = len(a)
    if not n:
        return [(np.full(resamples, np.nan), np.full(resamples, np.nan)) for _ in qs]
    orders = (np.argsort(a, kind="stable"), np.argsort(b, kind="stable"))
    ranks = []
    for o in orders:
        inv = np.empty(n, dtype=np.int64)
        inv[o] = np.arange(n)
        ranks.append(inv)
    return [_paired_at(a, b, orders, (ranks[0], ranks[1]), q, resamples, rng) for q in qs]


def _paired_at(
    a: FloatArray,
    b: FloatArray,
    orders: tuple[IntArray, IntArray],
    ranks: tuple[IntArray, IntArray],
    q: float,
    resamples: int,
    rng: np.random.Generator,
) -> tuple[FloatArray, FloatArray]:
    n = len(a)
    qa, qb = np.full(resamples, np.nan), np.full(resamples, np.nan)
    wins = [_window(n, q)] * 2
    union = np.union1d(orders[0][wins[0][0] : wins[0][1]], orders[1][wins[1][0] : wins[1][1]])
    in_union = np.zeros(n, dtype=bool)
    in_union[union] = True
    below = [rk < w[0] for rk, w in zip(ranks, wins, strict=True)]
    # The four cells of the elements outside both windows: (below in a?, below in b?).
    cells = [(ba, bb) for ba in (True, False) for bb in (True, False)]
    cell_members = [np.flatnonzero(~in_union & (below[0] == ba) & (below[1] == bb)) for ba, bb in cells]
    cell_sizes = np.array([len(m) for m in cell_members], dtype=np.int64)
    plan = []
    for k, (o, (lo, hi), vals) in enumerate(zip(orders, wins, (a, b), strict=True)):
        cell_cols = [c for c, cell in enumerate(cells) if cell[k]]
        union_below = below[k][union]
        cols = np.searchsorted(union, o[lo:hi])
        plan.append((cell_cols, union_below, cols, vals[o[lo:hi]]))
    for start in range(0, resamples, _BLOCK):
        nb = min(_BLOCK, resamples - start)
        wu = _poisson1(rng, (nb, len(union)))
        wc = rng.poisson(cell_sizes, (nb, len(cells)))
        total = wu.sum(axis=1) + wc.sum(axis=1)
        r = _rank(q, total)
        bad = total <= 0
        picked = []
        for cell_cols, union_below, cols, window_values in plan:
            base = wc[:, cell_cols].sum(axis=1) + wu[:, union_below].sum(axis=1)
            run = np.cumsum(wu[:, cols], axis=1, dtype=np.int32)
            run += base.astype(np.int32)[:, None]
            j = (run < r[:, None]).sum(axis=1)
            bad |= (base >= r) | (j >= len(cols))
            picked.append(window_values[np.minimum(j, len(cols) - 1)])
        qa[start : start + nb], qb[start : start + nb] = picked
        for i in np.flatnonzero(bad):
            if total[i] <= 0:
                qa[start + i] = qb[start + i] = np.nan
                continue
            # A quantile left its window: spread each cell's sum over its elements (given the sum, independent
            # Poisson(1)s are uniform multinomial), then look both quantiles up over the whole resample.
            w = np.zeros(n, dtype=np.int64)
            w[union] = wu[i]
            for c, members in enumerate(cell_members):
                if len(members):
                    w[members] += np.bincount(rng.integers(0, len(members), wc[i, c]), minlength=len(members))
            for out, o, vals in ((qa, orders[0], a), (qb, orders[1], b)):
                out[start + i] = vals[o[int(np.searchsorted(np.cumsum(w[o]), int(r[i]), side="left"))]]
    return qa, qb


def block_length(values: FloatArray) -> int:
    """The circular block bootstrap's block length for the mean of `values`, in bins: Politis & White's (2004)
    automatic rule with Patton, Politis & White's (2009) correction. The lags are cut at M = 2 m, m the first lag
    followed by K = max(5, sqrt(log10 n)) autocorrelations inside +-2 sqrt(log10 n / n) (at most sqrt(n) + K); a
    flat-top kernel over them estimates the long-run variance g and G = sum |k| R(k); the block is
    (2 G^2 / (4/3 g^2))^(1/3) n^(1/3), rounded, from 1 (no autocorrelation) to min(3 sqrt(n), n / 3)."""
    n = len(values)
    if n < 8:
        return 1  # too few bins to estimate any autocorrelation: resample them one by one
    x = np.asarray(values, dtype=np.float64) - float(np.mean(values))
    acv0 = float(x @ x) / n
    if acv0 <= 0:
        return 1
    kn = max(5, math.ceil(math.sqrt(math.log10(n))))
    m_max = math.ceil(math.sqrt(n)) + kn
    lags = min(m_max + kn, n - 1)
    acv = np.array([float(x[: n - k] @ x[k:]) / n for k in range(lags + 1)])
    small = np.abs(acv / acv0) < 2.0 * math.sqrt(math.log10(n) / n)
    m = next((m for m in range(lags - kn + 1) if small[m + 1 : m + kn + 1].all()), None)
    cut = min(m_max, lags) if m is None else min(2 * max(m, 1), m_max, lags)
    k = np.arange(1, cut + 1)
    flat_top = np.where(k <= cut / 2, 1.0, 2.0 * (1.0 - k / cut))
    g_big = 2.0 * float(np.sum(flat_top * k * acv[1 : cut + 1]))
    long_run = acv0 + 2.0 * float(np.sum(flat_top * acv[1 : cut + 1]))
    if long_run <= 0 or g_big == 0:
        return 1
    b = (2.0 * g_big**2 / (4.0 / 3.0 * long_run**2)) ** (1.0 / 3.0) * n ** (1.0 / 3.0)
    return int(min(max(round(b), 1), max(math.floor(min(3.0 * math.sqrt(n), n / 3.0)), 1)))


def boot_block_means(
    values: FloatArray, resamples: int, rng: np.random.Generator, block: int | None = None
) -> FloatArray:
    """Bootstrap means of a series (a timeline's bins) by the circular block bootstrap: each resample strings
    together ceil(n / b) blocks of b consecutive bins from uniform starts, wrapping past the end (so every bin is
    equally likely and the resampled mean is centred on the sample's), cut to n bins. `block`: b, by default
    `block_length(values)`; 1 is the plain bootstrap of independent bins."""
    n = len(values)
    if not n:
        return np.full(resamples, np.nan)
    b = min(max(block_length(values) if block is None else block, 1), n)
    per = -(-n // b)
    starts = rng.integers(0, n, (resamples, per))
    idx = ((starts[:, :, None] + np.arange(b)).reshape(resamples, per * b)[:, :n]) % n
    return np.asarray(np.asarray(values, dtype=np.float64)[idx].mean(axis=1), dtype=np.float64)


def percentile_interval(stats: FloatArray, confidence: float) -> tuple[float, float] | None:
    """The percentile interval of bootstrap values (NaN ones left out; None when there are none), as order
    statistics (the inverted CDF, as `quantile`): a bound among infinite values (censored) is +-inf, not NaN."""
    s = np.sort(stats[~np.isnan(stats)])
    if not len(s):
        return None
    tail = (1.0 - confidence) / 2.0
    ranks = _rank(tail, len(s)), _rank(1.0 - tail, len(s))
    return float(s[int(ranks[0]) - 1]), float(s[int(ranks[1]) - 1])
