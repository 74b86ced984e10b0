"""One HDR bucket layout (lowest and highest trackable value, significant digits), shared by every histogram of it.

A `LatencyHistogram` keeps only the window of counts its values fall in (measure/histogram.py); what depends on the
layout alone lives here, once per layout and process: hdrh's index arithmetic and walkers (of one template
`HdrHistogram`, whose counts stay zero at rest and serve the V2 encoder), each slot's lowest and highest value (the
bookkeeping of a merge, looked up instead of three hdrh method calls). Nothing is built at import: a layout on the
first histogram of it, its slot tables on the first merge.
"""

from __future__ import annotations

import binascii
import ctypes
import sys
import zlib
from array import array
from collections.abc import Callable
from typing import Any

import numpy as np
import pyhdrh
from hdrh.histogram import HdrHistogram

from loadgen.measure import _hdr_internals as hdr

__all__ = ["DIGITS", "HIGHEST_US", "LOWEST_US", "PAYLOAD_HEADER_SIZE", "Layout", "add_counts", "layout_for"]

# HdrHistogram V2's payload header: cookie, length, normalizing offset, digits, lowest, highest, conversion ratio.
PAYLOAD_HEADER_SIZE = 40

# The latency histograms' layout: 1 µs … 1 h, 3 significant digits (any value within 0.1 %).
LOWEST_US = 1
HIGHEST_US = 3_600_000_000
DIGITS = 3


class Layout:
    """hdrh's layout of (lowest, highest, digits), its tables and scratch. `counts_len` slots in all."""

    __slots__ = (
        "key",
        "template",
        "counts_len",
        "index",
        "value_at",
        "median_of",
        "highest_of",
        "empty_blob",
        "empty_wire",
        "_lowest",
        "_highest",
        "_merge_args",
    )

    def __init__(self, lowest: int, highest: int, digits: int) -> None:
        t = HdrHistogram(lowest, highest, digits)
        hdr.check(t)
        self.key = (lowest, highest, digits)
        self.template = t
        self.counts_len = hdr.counts_len(t)
        self.index: Callable[[int], int] = hdr.index_function(t)
        self.value_at, self.median_of, self.highest_of = hdr.walkers(t)
        self.empty_blob = bytes(t.encode())
        # The same empty histogram as the wire carries it (`wire`): hdrh's V2 payload header, no counts.
        self.empty_wire = zlib.decompress(binascii.a2b_base64(self.empty_blob)[8:])[:PAYLOAD_HEADER_SIZE]
        self._lowest: array[int] | None = None
        self._highest: array[int] | None = None
        self._merge_args: tuple[int, int, int, int, array[int], array[int]] | None = None

    def slot_values(self) -> tuple[array[int], array[int]]:
        """Each slot's lowest and highest equivalent value (hdrh's `get_value_from_index` and
        `get_highest_equivalent_value` of it), computed from the layout: the same arithmetic, one pass, checked
        against hdrh on a sample here and on every slot in tests/unit/test_histogram_window.py."""
        if self._lowest is None or self._highest is None:
            t = self.template
            unit, half_mag = hdr.layout_magnitudes(t)
            half = 1 << half_mag
            lowest, highest = array("q"), array("q")
            for i in range(self.counts_len):
                b = (i >> half_mag) - 1
                sub = (i & (half - 1)) + half
                if b < 0:
                    sub -= half
                    b = 0
                lowest.append(sub << (b + unit))
                highest.append((sub << (b + unit)) + (1 << (b + unit)) - 1)
            for i in (*range(0, self.counts_len, 97), self.counts_len - 1):
                if lowest[i] != self.value_at(i) or highest[i] != self.highest_of(self.value_at(i)):
                    raise hdr.HdrInternalsChanged(f"hdrh's value of slot {i} is not the layout's arithmetic")
            self._lowest, self._highest = lowest, highest
        return self._lowest, self._highest

    def merge_args(self) -> tuple[int, int, int, int, array[int], array[int]]:
        """(lowest, highest, digits, counts_len, slots' lowest values, slots' highest values): what the C merge of a
        wire histogram into this layout's histograms asks for (hist_merge.merge_encoded_many), built once."""
        if self._merge_args is None:
            self._merge_args = (*self.key, self.counts_len, *self.slot_values())
        return self._merge_args

    def encode(
        self, counts: ctypes.Array[ctypes.c_int64], off: int, total: int, min_value: int, max_value: int
    ) -> bytes:
        """hdrh's V2 encoding of a histogram whose counts are `counts` from slot `off` (zero elsewhere), by hdrh
        itself (the same bytes as before the window): compressed, base64."""
        if not total:
            return self.empty_blob
        return self._in_template(counts, off, total, min_value, max_value, lambda t: bytes(t.encode()))

    def wire(self, counts: ctypes.Array[ctypes.c_int64], off: int, total: int, min_value: int, max_value: int) -> bytes:
        """What the workers ship: `encode`'s V2 payload before zlib and base64 (the bytes hdrh would deflate).
        Inside msgpack neither pays: base64 only grows it, and zlib shrinks a histogram's LEB128 counts by a third
        at most while costing the worker a deflate and the master, for every blob of every worker, an inflate
        (`python -m bench.merge`). Readers take either form (hist_merge.merge_encoded_into)."""
        if not total:
            return self.empty_wire
        return self._in_template(
            counts, off, total, min_value, max_value, lambda t: hdr.encode_payload(t, self.empty_wire)
        )

    def _in_template(
        self,
        counts: ctypes.Array[ctypes.c_int64],
        off: int,
        total: int,
        min_value: int,
        max_value: int,
        encode: Callable[[HdrHistogram], bytes],
    ) -> bytes:
        """`encode(template)` with the counts copied into the template, which is zeroed again after."""
        t = self.template
        dst = ctypes.addressof(hdr.counts(t)) + 8 * off
        size = 8 * len(counts)
        ctypes.memmove(dst, ctypes.addressof(counts), size)
        t.total_count, t.min_value, t.max_value = total, min_value, max_value
        try:
            return encode(t)
        finally:
            ctypes.memset(dst, 0, size)
            t.total_count, t.min_value, t.max_value = 0, sys.maxsize, 0


# From this many slots on, `add_counts` adds in numpy (measured: bench/scale.py's merge part and bench.render).
_NUMPY_FROM = 1024

_LAYOUTS: dict[tuple[int, int, int], Layout] = {}


def layout_for(lowest: int, highest: int, digits: int) -> Layout:
    """The process's one `Layout` of these parameters."""
    lay = _LAYOUTS.get((lowest, highest, digits))
    if lay is None:
        lay = _LAYOUTS[(lowest, highest, digits)] = Layout(lowest, highest, digits)
    return lay


def add_counts(dst: ctypes.Array[Any], dst_at: int, src: ctypes.Array[Any], src_at: int, n: int) -> None:
    """dst[dst_at : dst_at + n] += src[src_at : src_at + n], 8-byte counts. Over the thousands of slots a latency
    spans, numpy's add is ~3x faster than hdrh's C `add_array`; over a few hundred, its views cost more than the
    loop (the master adds every worker's every histogram)."""
    if 0 < n < _NUMPY_FROM:
        pyhdrh.add_array(ctypes.addressof(dst) + 8 * dst_at, ctypes.addressof(src) + 8 * src_at, n, 8)
    elif n > 0:
        d = np.frombuffer(memoryview(dst).cast("B"), dtype=np.int64)[dst_at : dst_at + n]
        np.add(d, np.frombuffer(memoryview(src).cast("B"), dtype=np.int64)[src_at : src_at + n], out=d)
