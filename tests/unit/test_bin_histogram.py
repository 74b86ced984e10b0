"""The timeline bins' small histograms: percentiles within 1 % of the samples' own (nearest rank), the same after
any split into merged parts, and a size bounded by the span of the values, not by their number."""

from __future__ import annotations

import random

from loadgen.measure.bin_histogram import RELATIVE_ERROR, BinHistogram

PS = (50.0, 90.0, 99.0, 99.9)


def _truth(values_us: list[int], p: float) -> float:
    ordered = sorted(values_us)
    rank = max(1, -(-int(p * 10) * len(ordered) // 1000))  # ⌈p/100 · n⌉, in integers
    return ordered[rank - 1] / 1e3


def test_percentiles_are_the_samples_within_1_percent_over_the_whole_range() -> None:
    rng = random.Random(2)
    assert RELATIVE_ERROR < 0.01
    for _ in range(300):
        values = [max(1, int(rng.lognormvariate(9, 3))) for _ in range(rng.randint(1, 80))]  # µs, 1 µs … ~1 h
        values = [min(v, 3_600_000_000) for v in values]
        h = BinHistogram()
        for v in values:
            h.record_us(v)
        for p, got in zip(PS, h.percentiles_ms(PS), strict=True):
            truth = _truth(values, p)
            # 1 %, plus the 3 decimals of a ms the column keeps.
            assert got is not None and abs(got - truth) <= RELATIVE_ERROR * truth + 0.0005, (p, got, truth)
    assert BinHistogram().percentiles_ms((50.0, 99.0)) == [None, None]


def test_merged_parts_are_the_whole() -> None:
    rng = random.Random(3)
    values = [int(rng.uniform(5_000, 900_000)) for _ in range(2000)]
    whole, parts = BinHistogram(), [BinHistogram() for _ in range(4)]
    for i, v in enumerate(values):
        whole.record_us(v)
        parts[i % 4].record_us(v)
    merged = BinHistogram()
    for part in reversed(parts):  # in any order: a part may start below or end above what is there
        merged.merge_wire(part.to_wire())
    assert merged.to_wire() == whole.to_wire() and merged.count() == 2000
    assert merged.percentiles_ms(PS) == whole.percentiles_ms(PS)


def test_its_size_is_bounded_by_the_span_of_the_values() -> None:
    h = BinHistogram()
    for _ in range(100_000):
        h.record_us(30_000)  # many samples of one value: one bucket
    assert len(h.counts) == 1 and h.count() == 100_000
    h.record_us(1)
    h.record_us(3_600_000_000)  # the whole range, 1 µs … 1 h
    assert len(h.counts) <= 1113 and h.counts.itemsize == 4  # ≤ 4.5 KB
    assert len(h.to_wire()) == 6  # only the buckets that hold a count travel
