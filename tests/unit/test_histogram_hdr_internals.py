"""The hdrh internals loadgen/measure/_hdr_internals.py wraps: present, and behaving as the fast paths assume. When an
hdrhistogram upgrade changes them, these fail with the name of what changed."""

from __future__ import annotations

import ctypes
import random
import zlib
from base64 import b64decode
from types import SimpleNamespace

import pytest
from hdrh.histogram import HdrHistogram

from loadgen.measure import _hdr_internals as hdr


def _hist() -> HdrHistogram:
    h = HdrHistogram(1, 3_600_000_000, 3)
    rng = random.Random(7)
    for _ in range(500):
        h.record_value(int(rng.lognormvariate(8, 2)) % 3_600_000_000)
    return h


def test_every_wrapped_name_is_there() -> None:
    hdr.check()
    hdr.check(HdrHistogram(1, 60_000_000, 2))


@pytest.mark.parametrize("name", hdr.ATTRIBUTES + hdr.METHODS)
def test_a_missing_name_is_reported_by_name(name: str) -> None:
    real = HdrHistogram(1, 3_600_000_000, 3)
    fake = SimpleNamespace(**{n: getattr(real, n) for n in hdr.ATTRIBUTES + hdr.METHODS if n != name})
    with pytest.raises(hdr.HdrInternalsChanged, match=f"HdrHistogram.{name}"):
        hdr.check(fake)


def test_counts_and_bookkeeping_are_what_record_value_keeps() -> None:
    h = _hist()
    arr = hdr.counts(h)
    assert isinstance(arr, ctypes.Array) and len(arr) == hdr.counts_len(h)
    assert sum(arr) == hdr.recorded(h)[0] == h.get_total_count()
    _, lo, hi = hdr.recorded(h)
    assert h.get_max_value() == h.get_highest_equivalent_value(hi) and lo <= h.get_min_value()
    # Adding counts by hand plus note_recorded equals record_value.
    by_hand, ref = HdrHistogram(1, 3_600_000_000, 3), HdrHistogram(1, 3_600_000_000, 3)
    for v in (5, 5, 70_000, 3_000_000):
        ref.record_value(v)
        hdr.counts(by_hand)[hdr.index_for(by_hand, v)] += 1
        hdr.note_recorded(by_hand, 1, v, v)
    assert list(hdr.counts(by_hand)) == list(hdr.counts(ref))
    assert hdr.recorded(by_hand) == hdr.recorded(ref)
    assert by_hand.get_value_at_percentile(50) == ref.get_value_at_percentile(50)


def test_index_helpers_agree_with_the_public_getters() -> None:
    h = _hist()
    value_at, median_of, highest_of = hdr.walkers(h)
    assert hdr.layout_magnitudes(h) == (0, 10)
    for v in (0, 1, 2047, 2048, 4095, 4096, 123_456, 3_600_000_000):
        i = hdr.index_for(h, v)
        assert value_at(i) == h.get_lowest_equivalent_value(v)
        assert highest_of(value_at(i)) == h.get_highest_equivalent_value(v)
        assert value_at(i) <= median_of(v) <= highest_of(v)


def test_decode_and_add_counts_equal_hdrh_decode() -> None:
    h = _hist()
    raw = b64decode(h.encode())
    payload = zlib.decompress(raw[8:])
    buf = (ctypes.c_int64 * (hdr.counts_len(h) + 100))()  # a larger buffer decodes a smaller layout too
    total, lo, hi = hdr.decode_counts(payload, buf, hdr.counts_len(h))
    counts = list(hdr.counts(h))
    assert total == h.get_total_count()
    assert list(buf)[: len(counts)] == counts and not any(list(buf)[len(counts) :])
    assert counts[lo] and counts[hi] and not any(counts[:lo]) and not any(counts[hi + 1 :])
    into = HdrHistogram(1, 3_600_000_000, 3)
    hdr.add_counts(into, buf, lo, hi - lo + 1)
    assert list(hdr.counts(into)) == counts


@pytest.mark.parametrize(
    "lowest, digits, highest", [(1, 3, 3_600_000_000), (1, 2, 60_000_000), (1, 1, 1_000_000), (1000, 3, 60_000_000)]
)
def test_the_inline_index_is_hdrhs_own(lowest: int, digits: int, highest: int) -> None:
    h = HdrHistogram(lowest, highest, digits)
    index = hdr.index_function(h)
    rng = random.Random(digits)
    values = [0, 1, 2, 2047, 2048, 2049, 4095, 4096, highest] + [rng.randrange(highest) for _ in range(5000)]
    values += [1 << k for k in range(highest.bit_length())] + [(1 << k) - 1 for k in range(1, highest.bit_length())]
    assert [index(v) for v in values] == [hdr.index_for(h, v) for v in values]
