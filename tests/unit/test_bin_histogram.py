"""The timeline bins' small histograms: percentiles within 1 % of the samples' own (nearest rank), the same after
any split into merged parts, and a size bounded by the span of the values, not by their number; merged from the wire
in C (`_hist_merge.merge_bin_pairs`) exactly as by the Python loop, on every input either meets."""

from __future__ import annotations

import os
import random
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.measure import _hist_merge
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


@contextmanager
def _pure_python() -> Iterator[None]:
    old = os.environ.get("LOADGEN_PURE_PYTHON")
    os.environ["LOADGEN_PURE_PYTHON"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["LOADGEN_PURE_PYTHON"]
        else:
            os.environ["LOADGEN_PURE_PYTHON"] = old


def _histogram(lo: int, counts: list[int]) -> BinHistogram:
    h = BinHistogram()
    if counts:
        h.lo, h.counts = lo, array("I", counts)
    return h


def _merged(h: BinHistogram, flat: list[Any]) -> tuple[Any, int, list[int]]:
    try:
        h.merge_wire(flat)
        error = None
    except Exception as e:  # noqa: BLE001 - the error is what is compared
        error = (type(e).__name__, str(e))
    return error, h.lo, h.counts.tolist()


# Buckets stay near the window: one far out would have the Python path allocate up to it (the C path leaves those,
# past +-2**40, to it: `test_the_c_merge_takes_what_it_reads_and_leaves_the_rest`).
_BUCKETS = st.one_of(st.integers(-3, 40), st.sampled_from([1.5, "3", "x", None, True]))
_COUNTS = st.one_of(
    st.integers(-3, 9), st.integers(2**32 - 3, 2**32 + 2), st.sampled_from([2**70, -(2**70), 1.5, "3", None])
)


@settings(max_examples=500, deadline=None)
@given(
    st.integers(-5, 30),
    st.lists(st.one_of(st.integers(0, 9), st.just(2**32 - 1)), max_size=12),
    st.lists(st.tuples(_BUCKETS, _COUNTS), max_size=7),
    st.lists(_BUCKETS, max_size=1),
)
def test_a_wire_merged_in_c_equals_the_python_loop(
    lo: int, counts: list[int], pairs: list[tuple[Any, Any]], odd: list[Any]
) -> None:
    flat = [x for pair in pairs for x in pair] + odd  # (an odd last item is no pair)
    c = _merged(_histogram(lo, counts), list(flat))
    with _pure_python():
        py = _merged(_histogram(lo, counts), list(flat))
    assert c == py


def test_the_c_merge_takes_what_it_reads_and_leaves_the_rest() -> None:
    h = BinHistogram()
    assert _hist_merge.merge_bin_pairs(h, [12, 2, 10, 1, 12, 3, 99])  # (the odd last item is no pair)
    assert (h.lo, h.counts.tolist()) == (10, [1, 0, 5])
    for flat in ([12, 1.0], [12, -1], ["12", 1], [2**41, 1]):
        assert not _hist_merge.merge_bin_pairs(h, flat)
        assert (h.lo, h.counts.tolist()) == (10, [1, 0, 5])  # nothing changed
    full = _histogram(3, [2**32 - 1])
    try:
        _hist_merge.merge_bin_pairs(full, [3, 1])
    except OverflowError as e:
        assert str(e) == "unsigned int is greater than maximum"
    else:
        raise AssertionError("a count past 2**32 - 1 was added")
