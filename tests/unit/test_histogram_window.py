"""LatencyHistogram keeps only the window of slots its values fall in (measure/histogram.py, measure/hdr_layout.py):
everything it reports, encodes and merges must be what a whole hdrh histogram of the same values gives — counts,
total, min, max, percentiles and the wire bytes — on random deltas, empty ones, one-slot ones, values clamped at
the top, and windows that grow down and up."""

from __future__ import annotations

import random

import pytest
from hdrh.histogram import HdrHistogram

from loadgen.measure.hdr_layout import layout_for
from loadgen.measure.hist_merge import merge_encoded_into
from loadgen.measure.histogram import LatencyHistogram

_LAYOUTS = ((3, 3600.0), (2, 60.0))


def _ref(digits: int, highest_s: float) -> HdrHistogram:
    return HdrHistogram(1, int(highest_s * 1e6), digits)


def _record_both(h: LatencyHistogram, ref: HdrHistogram, seconds: float, count: int = 1) -> None:
    """The value as `record` takes it (µs, clamped into the layout) into both."""
    h.record(seconds, count)
    us = min(max(int(seconds * 1e6 + 0.5), 0), ref.highest_trackable_value)
    ref.record_value(us, count)


def _same(h: LatencyHistogram, ref: HdrHistogram, with_min: bool = True) -> None:
    """Equal counts, total, max, percentiles and mean; and min, unless `ref` is hdrh's decode_and_add (its `add`
    lowers min to 0 when it adds into an empty histogram, which the merge before the window never did either)."""
    whole = h.to_hdrh()
    assert list(whole.counts) == list(ref.counts)
    assert (h.count, whole.max_value, h.max()) == (ref.total_count, ref.max_value, ref.get_max_value() / 1e6)
    if with_min:
        assert (whole.min_value, h.min()) == (ref.min_value, ref.get_min_value() / 1e6)
    for p in (0, 50, 90, 99, 99.9, 100):
        assert h.percentile(p) == ref.get_value_at_percentile(p) / 1e6, p
    assert h.mean() == ref.get_mean_value() / 1e6


def _draw(rng: random.Random, kind: str) -> list[float]:
    if kind == "empty":
        return []
    if kind == "one-slot":
        return [0.0123] * rng.randint(1, 5)
    if kind == "edges":
        return [0.0, 1e-6, 2.047e-3, 2.048e-3, 59.0, 10_000.0]  # the top clamps (60 s or 1 h)
    return [rng.lognormvariate(-3.5, 1.5) for _ in range(rng.randint(1, 400))]


@pytest.mark.parametrize(("digits", "highest_s"), _LAYOUTS)
def test_slot_tables_equal_hdrh_on_every_slot(digits: int, highest_s: float) -> None:
    lay = layout_for(1, int(highest_s * 1e6), digits)
    lowest, highest = lay.slot_values()
    ref = _ref(digits, highest_s)
    assert len(lowest) == len(highest) == ref.counts_len
    assert list(lowest) == [ref.get_value_from_index(i) for i in range(ref.counts_len)]
    assert list(highest) == [ref.get_highest_equivalent_value(v) for v in lowest]


@pytest.mark.parametrize(("digits", "highest_s"), _LAYOUTS)
def test_recording_encoding_and_merging_deltas_equal_a_whole_hdrh_histogram(digits: int, highest_s: float) -> None:
    rng = random.Random(digits)
    merged = LatencyHistogram(digits=digits, highest_s=highest_s)
    alias = LatencyHistogram(digits=digits, highest_s=highest_s)
    ref_sum = _ref(digits, highest_s)  # the straight sum: every value recorded into one whole histogram
    by_hdrh = _ref(digits, highest_s)  # the merge as it was: hdrh's decode_and_add of each delta
    for k in range(60):
        kind = ("random", "empty", "one-slot", "edges")[k % 4] if k % 3 else "random"
        delta, ref_delta = LatencyHistogram(digits=digits, highest_s=highest_s), _ref(digits, highest_s)
        for v in _draw(rng, kind):
            _record_both(delta, ref_delta, v)
            _record_both(LatencyHistogram(digits=digits, highest_s=highest_s), ref_sum, v)
        _same(delta, ref_delta)
        blob = delta.encode()
        assert blob == bytes(ref_delta.encode())  # the wire bytes are hdrh's own
        merge_encoded_into(blob, (merged, alias))
        by_hdrh.decode_and_add(blob)
        _same(merged, by_hdrh, with_min=False)
        _same(alias, by_hdrh, with_min=False)
    assert list(merged.to_hdrh().counts) == list(ref_sum.counts)
    assert merged.count == ref_sum.total_count
    assert merged.min() == ref_sum.get_min_value() / 1e6  # the lowest slot's value, as before
    assert merged.summary_ms() == alias.summary_ms()


def test_window_grows_down_and_up_and_holds_a_fraction_of_the_layout() -> None:
    h, ref = LatencyHistogram(), _ref(3, 3600.0)
    for v in (0.050, 0.020, 0.200, 0.010):  # each outside the window so far
        _record_both(h, ref, v, 3)
        _same(h, ref)
    off, counts = h.counts_window()
    assert counts is not None and off > 0
    # 10–200 ms span ~4,500 of the 23,552 slots: the window holds them, not the whole layout.
    assert len(counts) * 8 < 48_000 < h.layout.counts_len * 8
    assert LatencyHistogram().counts_window() == (0, None)  # nothing held while empty


def test_merge_equals_hdrh_add_including_empty_sides() -> None:
    rng = random.Random(7)
    for a_n, b_n in ((0, 0), (0, 50), (50, 0), (200, 300)):
        a, b, ra, rb = LatencyHistogram(), LatencyHistogram(), _ref(3, 3600.0), _ref(3, 3600.0)
        for _ in range(a_n):
            _record_both(a, ra, rng.uniform(0.5, 3.0))
        for _ in range(b_n):
            _record_both(b, rb, rng.lognormvariate(-4, 1))
        a.merge(b)
        ra.add(rb)
        _same(a, ra)


def test_decode_and_another_layout_map_as_hdrh_does() -> None:
    rng = random.Random(8)
    h, ref = LatencyHistogram(), _ref(3, 3600.0)
    for _ in range(500):
        _record_both(h, ref, rng.expovariate(1 / 0.03))
    _same(h, ref)
    _same(LatencyHistogram.decode(h.encode()), HdrHistogram.decode(h.encode()))  # what decode returned before
    coarse, ref_coarse = LatencyHistogram(digits=2, highest_s=60.0), _ref(2, 60.0)
    for v in (0.0002, 0.0031, 0.047, 1.5):
        _record_both(coarse, ref_coarse, v, 2)
    into, ref_into = LatencyHistogram(), _ref(3, 3600.0)
    merge_encoded_into(coarse.encode(), (into,))
    ref_into.decode_and_add(bytes(ref_coarse.encode()))
    _same(into, ref_into, with_min=False)


def test_timeline_bin_histogram_merges_parts_in_one_pass_as_recording_them() -> None:
    from loadgen.measure.bin_histogram import BinHistogram

    rng = random.Random(9)
    whole, merged = BinHistogram(), BinHistogram()
    parts: list[list[int]] = [[], [1500], [5_000_000, 10], [rng.randint(1, 3_000_000) for _ in range(300)], [2]]
    for values in parts:  # empty, one bucket, then windows that grow up and down
        part = BinHistogram()
        for us in values:
            part.record_us(us)
            whole.record_us(us)
        merged.merge_wire(part.to_wire())
        assert (merged.lo, list(merged.counts)) == (whole.lo, list(whole.counts))
    merged.merge_wire([])
    assert merged.to_wire() == whole.to_wire()
