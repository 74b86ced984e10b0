"""Bootstrap intervals (loadgen/report/bootstrap.py) against ground truth: coverage of known ratios over synthetic
replications, and the windowed Poisson resampling against the textbook bootstrap it stands in for."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.report import bootstrap
from loadgen.report.bootstrap import (
    Sample,
    block_length,
    boot_block_means,
    boot_paired,
    boot_quantiles,
    percentile_interval,
    quantile,
)
from loadgen.report.compare import ratio_interval

_Z99 = 2.3263478740408408  # the standard normal's 0.99 quantile
_MU, _SIGMA, _SHIFT, _NOISE = 3.0, 0.5, -0.3, 0.2


def _true_ratio(q: float) -> float:
    """Baseline ~ exp(N(mu, sigma)), variant = baseline x exp(N(shift, noise)): both lognormal, so the ratio of
    their q-quantiles is exact."""
    z = _Z99 if q == 0.99 else 0.0
    return math.exp(_MU + z * _SIGMA) / math.exp(_MU + _SHIFT + z * math.hypot(_SIGMA, _NOISE))


def _coverage(n: int, q: float, paired: bool, reps: int = 200) -> float:
    hits = 0
    for k in range(reps):
        g = np.random.default_rng(1000 + k)
        a = np.exp(_MU + _SIGMA * g.standard_normal(n))
        if paired:
            b = a * np.exp(_SHIFT + _NOISE * g.standard_normal(n))
            ((qa, qb),) = boot_paired(a, b, [q], 1000, np.random.default_rng(k))
        else:
            b = np.exp(_MU + _SHIFT + math.hypot(_SIGMA, _NOISE) * g.standard_normal(n))
            rng = np.random.default_rng(k)
            qa, qb = boot_quantiles(Sample.of(a), q, 1000, rng), boot_quantiles(Sample.of(b), q, 1000, rng)
        lo, hi, *_ = ratio_interval(qa, qb, 0.95)
        assert lo is not None and hi is not None
        hits += lo <= _true_ratio(q) <= hi
    return hits / reps


@pytest.mark.parametrize(
    ("n", "q", "paired"),
    [(300, 0.5, True), (300, 0.5, False), (5000, 0.99, True)],
    ids=["paired-p50", "unpaired-p50", "paired-p99"],
)
def test_a_95_percent_interval_covers_the_true_ratio_90_to_99_percent_of_the_time(
    n: int, q: float, paired: bool
) -> None:
    # 200 replications, 1,000 resamples each, fixed seeds: the binomial spread of a 95 % rate over 200 draws is
    # ±1.5 %, and percentile intervals of quantiles run a little wide (their values are sample values); 90-99 %.
    cover = _coverage(n, q, paired)
    assert 0.90 <= cover <= 0.99, cover


def _naive_paired(a: np.ndarray, b: np.ndarray, q: float, resamples: int) -> np.ndarray:
    rng = np.random.default_rng(99)
    idx = rng.integers(0, len(a), (resamples, len(a)))
    qa = np.quantile(a[idx], q, axis=1, method="inverted_cdf")
    qb = np.quantile(b[idx], q, axis=1, method="inverted_cdf")
    return np.asarray(qa / qb)


@pytest.mark.parametrize("sds", [bootstrap._SDS, 0.3], ids=["window", "window-too-narrow"])
@pytest.mark.parametrize("q", [0.5, 0.99])
def test_windowed_poisson_resampling_matches_the_textbook_bootstrap(
    monkeypatch: pytest.MonkeyPatch, q: float, sds: float
) -> None:
    # With a window of 0.3 standard deviations most resamples leave it and are completed exactly: the same
    # distribution must come out. (One sample's quantile is drawn exactly without a window: the same check holds it.)
    monkeypatch.setattr(bootstrap, "_SDS", sds)
    g = np.random.default_rng(3)
    a = np.round(np.exp(3 + 0.5 * g.standard_normal(2000)) * 1000)
    b = np.round(a * np.exp(-0.2 + 0.1 * g.standard_normal(2000)))
    ((qa, qb),) = boot_paired(a, b, [q], 1000, np.random.default_rng(4))
    mine = qa / qb
    ref = _naive_paired(a, b, q, 1000)
    assert not np.isnan(mine).any()
    # 1,000 resamples each: a spread's standard error is ~2.2 %, a mean's ~4.5 % of the spread; 12 % and 0.2 of
    # the spread are 4 standard errors.
    assert abs(mine.mean() - ref.mean()) < 0.2 * ref.std()
    assert 0.88 < mine.std() / ref.std() < 1.12
    single = boot_quantiles(Sample.of(a), q, 1000, np.random.default_rng(5))
    idx = np.random.default_rng(6).integers(0, len(a), (1000, len(a)))
    ref_single = np.quantile(a[idx], q, axis=1, method="inverted_cdf")
    assert abs(single.mean() - ref_single.mean()) < 0.2 * ref_single.std()
    assert 0.88 < single.std() / ref_single.std() < 1.12


def test_quantiles_are_the_inverted_cdf_over_counts() -> None:
    s = Sample.of([4.0, 1.0, 3.0, 2.0])
    assert quantile(s, 0.5) == 2.0 and quantile(s, 0.75) == 3.0 and quantile(s, 0.99) == 4.0
    # 0.99 x 100 is 99 in exact arithmetic: rank 99, not 100.
    counted = Sample.of([1.0, 2.0], [99, 1])
    assert quantile(counted, 0.99) == 1.0 and quantile(counted, 0.995) == 2.0
    assert quantile(Sample.of([]), 0.5) is None
    assert np.isnan(boot_quantiles(Sample.of([]), 0.5, 10, np.random.default_rng(0))).all()


def test_identical_samples_give_an_interval_of_exactly_one() -> None:
    a = np.exp(np.random.default_rng(0).standard_normal(500))
    for qa, qb in boot_paired(a, a.copy(), [0.5, 0.99], 500, np.random.default_rng(1)):
        assert percentile_interval(qa / qb, 0.95) == (1.0, 1.0)


def _ar1(n: int, phi: float, g: np.random.Generator, mean: float) -> np.ndarray:
    """A stationary AR(1) series around `mean`: a timeline whose busy seconds come in runs."""
    e = g.standard_normal(n + 100)
    x = np.empty(n + 100)
    x[0] = e[0] / math.sqrt(1 - phi * phi)
    for t in range(1, n + 100):
        x[t] = phi * x[t - 1] + e[t]
    return np.asarray(mean + 3.0 * x[100:])


def test_the_block_length_grows_with_the_autocorrelation() -> None:
    g = np.random.default_rng(0)
    assert block_length(np.asarray(50 + g.standard_normal(300))) <= 2
    lengths = [block_length(_ar1(300, phi, np.random.default_rng(1), 50.0)) for phi in (0.3, 0.6, 0.9)]
    assert lengths == sorted(lengths) and lengths[0] >= 2 and lengths[-1] >= 10
    assert block_length(np.arange(5.0)) == 1  # too few bins to estimate autocorrelation
    assert block_length(np.full(100, 7.0)) == 1
    # The rule's cap: min(3 sqrt(n), n / 3).
    assert block_length(np.cumsum(g.standard_normal(60))) <= 20


def test_throughput_intervals_of_autocorrelated_bins_are_wider_and_cover_the_truth() -> None:
    # Two runs' per-second throughput, AR(1) of 0.5 over 300 bins around 50 and 40 req/s: the interval of the
    # ratio of their means against the truth 0.8. Resampling single bins as independent ignores that a busy second
    # follows a busy second: its interval is ~1 / 1.7 as wide as it should be, and covers ~75 % of the time.
    hits = naive_hits = 0
    widths = []
    reps = 150
    for k in range(reps):
        g = np.random.default_rng(k)
        base, new = _ar1(300, 0.5, g, 50.0), _ar1(300, 0.5, g, 40.0)
        rng = np.random.default_rng(10_000 + k)
        block = ratio_interval(boot_block_means(new, 500, rng), boot_block_means(base, 500, rng), 0.95)
        naive = ratio_interval(boot_block_means(new, 500, rng, 1), boot_block_means(base, 500, rng, 1), 0.95)
        assert block.low is not None and block.high is not None and naive.low is not None and naive.high is not None
        hits += block.low <= 0.8 <= block.high
        naive_hits += naive.low <= 0.8 <= naive.high
        widths.append((block.high - block.low) / (naive.high - naive.low))
    assert float(np.median(widths)) > 1.3
    # 150 replications: a 95 % rate's binomial spread is ±1.8 %; block bootstraps of short series run a little
    # narrow (~93 % here), the naive one far narrower.
    assert 0.89 <= hits / reps <= 0.99, hits / reps
    assert naive_hits / reps < 0.85, naive_hits / reps


def test_block_resampling_of_independent_bins_is_the_plain_bootstrap() -> None:
    v = np.random.default_rng(2).exponential(10.0, 200)
    means = boot_block_means(v, 2000, np.random.default_rng(3), block=1)
    assert abs(means.mean() - v.mean()) < 0.05 * v.std()
    assert 0.9 < means.std() / (v.std() / math.sqrt(len(v))) < 1.1
    # Circular blocks leave the resampled mean centred on the sample's, whatever the block.
    blocks = boot_block_means(v, 2000, np.random.default_rng(4), block=20)
    assert abs(blocks.mean() - v.mean()) < 0.1 * v.std() / math.sqrt(len(v)) * 3
    assert np.isnan(boot_block_means(np.asarray([]), 3, np.random.default_rng(0))).all()


def test_intervals_over_censored_values_are_ranked_never_nan() -> None:
    # A resample whose quantile fell among failed requests is +inf; the bounds are order statistics, so a bound
    # there is +inf (censored), not NaN; a measured value over a censored one ranks below every ratio.
    stats = np.array([0.9] * 50 + [1.0] * 900 + [np.inf] * 50)
    assert percentile_interval(stats, 0.95) == (0.9, np.inf)
    r = ratio_interval(np.array([1.0] * 960 + [np.inf] * 40), np.ones(1000), 0.95)
    assert (r.low, r.high, r.within_noise, r.low_censored, r.high_censored) == (1.0, None, True, False, True)
    r = ratio_interval(np.ones(1000), np.array([1.1] * 950 + [np.inf] * 50), 0.95)
    assert (r.low, r.high, r.within_noise, r.low_censored, r.high_censored) == (None, 0.9091, False, True, False)
    both = ratio_interval(np.full(10, np.inf), np.full(10, np.inf), 0.95)
    assert (both.low, both.high, both.within_noise) == (1.0, 1.0, True)  # tied above every value
