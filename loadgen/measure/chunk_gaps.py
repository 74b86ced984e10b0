"""Recording one stream's chunk gaps into its ITL and ICL histograms: the worker's per-request hot path, with the
3-digit layout's bucket index computed inline or looked up (measure/histogram.py holds the histograms)."""

from __future__ import annotations

import itertools
from array import array
from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol

from hdrh.histogram import HdrHistogram

from loadgen.measure import _hdr_internals as hdr
from loadgen.measure.hdr_layout import DIGITS, HIGHEST_US, LOWEST_US


class _Window(Protocol):
    """What recording needs of a `LatencyHistogram` (measure/histogram.py, which imports this module)."""

    _off: int

    def _cover(self, lo: int, hi: int) -> Any: ...

    def _note(self, n: int, lo: int, hi: int) -> None: ...

    def _add_slots(self, slot_counts: dict[int, int], n: int, lo_value: int, hi_value: int) -> None: ...


__all__ = ["record_chunk_gaps"]

# The bucket layout of HdrHistogram(1 µs, 1 h, 3 digits), for computing a value's counts index inline on the hot
# path: hdrh's record_value is several Python calls per value, the inline form one expression (`python -m
# bench.hotpath` prints what recording a request's chunk gaps costs). Checked against hdrh on first use
# (`_GapIndex.build`), not at import.
_SUB_HALF_MAG = 10  # sub_bucket_half_count_magnitude: 2 * 10**3 → 2048 sub-buckets
_SUB_MASK = (1 << (_SUB_HALF_MAG + 1)) - 1
_SHIFT0 = _SUB_HALF_MAG + 1
_SUB_HALF = 1 << _SUB_HALF_MAG


def _index(us: int) -> int:
    b = (us | _SUB_MASK).bit_length() - _SHIFT0
    return ((b + 1) << _SUB_HALF_MAG) + (us >> b) - _SUB_HALF


def _check_layout() -> None:
    h = HdrHistogram(LOWEST_US, HIGHEST_US, DIGITS)
    hdr.check(h)
    assert hdr.layout_magnitudes(h) == (0, _SUB_HALF_MAG)
    for v in (0, 1, 2047, 2048, 4095, 4096, 123_456, HIGHEST_US):
        assert hdr.index_for(h, v) == _index(v), v


# Bucket index of every value below 65.536 ms (a gap between two chunks, almost always), looked up instead of
# computed: 512 KiB per process that records chunk gaps, none in one that does not (`loadgen validate`).
_TABLE_TOP = 1 << 16


def _index_table() -> array[int]:
    """`_index(u)` for every u < _TABLE_TOP, from the layout: values below 2048 µs are their own index; in bucket
    b ≥ 1, index b·1024 + j (j = 1024…2047) stands for 2**b consecutive values. Built with C-level repeats, several
    times faster than calling `_index` for each value."""
    table = array("l", range(2 * _SUB_HALF))
    for b in range(1, (_TABLE_TOP // (2 * _SUB_HALF)).bit_length()):
        base = b << _SUB_HALF_MAG
        table.extend(
            itertools.chain.from_iterable(itertools.repeat(base + j, 1 << b) for j in range(_SUB_HALF, 2 * _SUB_HALF))
        )
    return table


class _GapIndex:
    """The inline bucket index of `record_chunk_gaps`, checked against hdrh (and hdrh's internals against
    `_hdr_internals`) and its lookup table built on the first call, not at import. Its state is a function of the
    constant layout above, so one instance serves the process (`_GAP_INDEX`)."""

    __slots__ = ("table",)

    def __init__(self) -> None:
        self.table: array[int] | None = None

    def build(self) -> array[int]:
        _check_layout()
        self.table = _index_table()
        return self.table


_GAP_INDEX = _GapIndex()


def record_chunk_gaps(itl: _Window, icl: _Window, times: Sequence[float], tokens: Sequence[int]) -> None:
    """Record one stream's chunk gaps: per-token ITL (a chunk of k tokens after gap g is k samples of g/k, recorded
    once with count k) and per-chunk ICL. This runs for every finished request, on the event loop that is timing
    the others: with one token per chunk (ITL = ICL) and every gap under 65 ms, the gaps are converted in list
    comprehensions and counted per bucket (Counter) rather than one by one; otherwise one pass with the bucket
    index computed inline."""
    n = len(times)
    if n < 2:
        return
    table = _GAP_INDEX.table or _GAP_INDEX.build()
    if tokens.count(1) - (tokens[0] == 1) == n - 1:
        gaps_us = [int((b - a) * 1e6 + 0.5) for a, b in zip(times, times[1:], strict=False)]
        lo, hi = min(gaps_us), max(gaps_us)
        if lo >= 0 and hi < _TABLE_TOP:
            lo_i, hi_i = table[lo], table[hi]
            ic, cc = itl._cover(lo_i, hi_i), icl._cover(lo_i, hi_i)
            io, co = itl._off, icl._off
            for i, c in Counter([table[u] for u in gaps_us]).items():
                ic[i - io] += c
                cc[i - co] += c
            itl._note(n - 1, lo, hi)
            icl._note(n - 1, lo, hi)
            return
    # Counts per slot first, then added: the window grows once, to the slots these gaps reach.
    ic_d: dict[int, int] = {}
    cc_d: dict[int, int] = {}
    top = HIGHEST_US
    prev = times[0]
    tok_total = gaps = 0
    lo_i = lo_c = top + 1
    hi_i = hi_c = -1
    for i in range(1, len(times)):
        t = times[i]
        g = t - prev
        prev = t
        us = int(g * 1e6 + 0.5)
        if us < 0:
            us = 0
        elif us > top:
            us = top
        b = (us | _SUB_MASK).bit_length() - _SHIFT0
        slot = ((b + 1) << _SUB_HALF_MAG) + (us >> b) - _SUB_HALF
        cc_d[slot] = cc_d.get(slot, 0) + 1
        gaps += 1
        if us < lo_c:
            lo_c = us
        if us > hi_c:
            hi_c = us
        k = tokens[i]
        if k <= 0:
            continue
        if k != 1:
            us = int(g / k * 1e6 + 0.5)
            if us < 0:
                us = 0
            elif us > top:
                us = top
            b = (us | _SUB_MASK).bit_length() - _SHIFT0
        slot = ((b + 1) << _SUB_HALF_MAG) + (us >> b) - _SUB_HALF
        ic_d[slot] = ic_d.get(slot, 0) + k
        tok_total += k
        if us < lo_i:
            lo_i = us
        if us > hi_i:
            hi_i = us
    icl._add_slots(cc_d, gaps, lo_c, hi_c)
    itl._add_slots(ic_d, tok_total, lo_i, hi_i)
