from __future__ import annotations

import random

from loadgen.histogram import RELATIVE_ERROR, LatencyHistogram


def _exact_percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    # hdrhistogram's rank: round(p % of N), at least 1.
    k = max(1, int(p * len(s) / 100 + 0.5))
    return s[k - 1]


def test_percentiles_within_stated_relative_error() -> None:
    rng = random.Random(1)
    values = [rng.lognormvariate(-3, 1.2) for _ in range(20_000)]  # ~50 ms median, long tail
    h = LatencyHistogram()
    for v in values:
        h.record(v)
    assert h.count == len(values)
    for p in (50, 90, 99, 99.9):
        exact = _exact_percentile(values, p)
        # 1 µs integer rounding + HDR bucket width.
        assert abs(h.percentile(p) - exact) <= exact * RELATIVE_ERROR * 1.01 + 1e-6, p
    assert abs(h.mean() - sum(values) / len(values)) <= 0.001 * h.mean()


def test_merge_of_encoded_parts_equals_one_histogram() -> None:
    rng = random.Random(2)
    whole, merged = LatencyHistogram(), LatencyHistogram()
    for _ in range(5):
        part = LatencyHistogram()
        for _ in range(1000):
            v = rng.uniform(0.001, 2.0)
            part.record(v)
            whole.record(v)
        merged.merge_encoded(part.encode())
    assert merged.count == whole.count == 5000
    for p in (50, 99, 99.9):
        assert merged.percentile(p) == whole.percentile(p)
    assert merged.max() == whole.max()


def test_weighted_record_and_clamping() -> None:
    h = LatencyHistogram()
    h.record(0.010, count=4)
    h.record(-1.0)  # clock oddity: clamped to 0, never raises
    h.record(10_000.0)  # beyond 1 h: clamped to the top
    assert h.count == 6
    assert abs(h.percentile(50) - 0.010) <= 0.010 * RELATIVE_ERROR
    assert h.min() == 0.0
    s = h.summary_ms()
    assert s["count"] == 6 and abs(s["p50"] - 10.0) < 0.02
    assert LatencyHistogram().summary_ms() == {"count": 0}
