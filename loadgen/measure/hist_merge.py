"""The master's merge of wire histograms into `LatencyHistogram`s: every worker's every histogram, every report
interval, and each worker's final.

One C call where built (`_hist_merge.c`: the blob read straight into the targets' counts), a group's or a slice's
histograms together (`merge_encoded_many`: no Python per histogram); the Python path (`merge_encoded_python`) gives
the same histograms (tests/unit/test_hist_merge.py holds both equal on every case either accepts).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from loadgen.measure import _hdr_internals as hdr
from loadgen.measure.hdr_layout import add_counts
from loadgen.measure.hist_blob import payload, payload_layout
from loadgen.measure.histogram import LatencyHistogram
from loadgen.pure_python import pure_python

__all__ = [
    "merge_encoded_into",
    "merge_encoded_many",
    "merge_encoded_python",
    "merge_encoded_rest",
    "native_merge_available",
]

try:  # the master's merge of a wire histogram in one C call (_hist_merge.c); optional, as every C half is
    from loadgen.measure import _hist_merge as _native
except ImportError:  # pragma: no cover - a build without a C compiler or zlib's headers
    _native = None  # type: ignore[assignment]  # (a C build may be absent)


class _DecodeBuffer:
    """Counts decoded from one wire blob before they are added to the targets: one array reused by every merge
    (the master decodes every worker's every histogram each report interval), grown to the largest bucket layout
    decoded so far. It never holds data between calls: the decoded range is zeroed again after the add. Merges run
    to completion on one event loop, so one instance serves the process (`_DECODE_BUFFER`); nothing is allocated
    until the first merge."""

    __slots__ = ("counts",)

    def __init__(self) -> None:
        self.counts: ctypes.Array[ctypes.c_int64] | None = None

    def at_least(self, n: int) -> ctypes.Array[ctypes.c_int64]:
        counts = self.counts
        if counts is None or len(counts) < n:
            counts = self.counts = (ctypes.c_int64 * n)()
        return counts


_DECODE_BUFFER = _DecodeBuffer()


def native_merge_available() -> bool:
    """Whether the C merge of wire histograms is built and not switched off (LOADGEN_PURE_PYTHON=1)."""
    return _native is not None and not pure_python()


def merge_encoded_into(blob: bytes | str, targets: Sequence[LatencyHistogram]) -> None:
    """Add one histogram, as the wire carries it (`wire()`) or as `encode()` writes it, to each of `targets`,
    decoding it once: in C where built (`_hist_merge.c`: the blob read straight into the targets' counts, one call),
    else `merge_encoded_python`. The C call answers for hdrh's V2 payload of the targets' layout (raw, base64 of
    it, or base64 of it compressed) and leaves everything else (another layout, a corrupt blob) to the Python path,
    untouched: both give the same histograms (tests/unit/test_hist_merge.py)."""
    lay = targets[0]._lay
    if blob == lay.empty_wire or blob == lay.empty_blob:
        return
    if _native is not None and not pure_python():
        lowest, highest, digits = lay.key
        status, total, lo, hi = _native.merge_v2(
            blob, lowest, highest, digits, lay.counts_len, [(t._counts, t._off) for t in targets]
        )
        if status == 1:  # a window to grow first (rare once a histogram has seen a few merges)
            for t in targets:
                t._cover(lo, hi)
            status, total, lo, hi = _native.merge_v2(
                blob, lowest, highest, digits, lay.counts_len, [(t._counts, t._off) for t in targets]
            )
        if status == 0:
            if total:
                lowest_at, highest_at = lay.slot_values()
                lo_value, hi_value = lowest_at[lo], highest_at[hi]
                for t in targets:  # `_note`, inline (once per histogram merged)
                    t._total += total
                    if lo_value < t._min:
                        t._min = lo_value
                    if hi_value > t._max:
                        t._max = hi_value
            return
    merge_encoded_python(blob, targets)


def merge_encoded_many(items: list[tuple[bytes | str, Sequence[LatencyHistogram]]]) -> None:
    """`merge_encoded_into` for each (blob, targets) of `items` in turn — a group's or a slice's histograms — in one
    C call where built (`_hist_merge.merge_many`: no Python per histogram). Any item the C call leaves (another
    layout, a window to grow first, a form it does not read) goes through `merge_encoded_into`, and the C call goes
    on after it: the same histograms as the items merged one by one, and the same error at the same item."""
    if not items:
        return
    if _native is None or pure_python():
        for blob, targets in items:
            merge_encoded_into(blob, targets)
        return
    lay = items[0][1][0]._lay
    left = _native.merge_many(items, 0, lay, *lay.merge_args())
    if left >= 0:
        merge_encoded_rest(items, left)


def merge_encoded_rest(items: list[tuple[bytes | str, Sequence[LatencyHistogram]]], left: int) -> None:
    """`merge_encoded_many` of `items` from the one a C call left (`left`; those before it are merged): that one
    through `merge_encoded_into`, the rest through the C call again, as `merge_encoded_many` goes on."""
    assert _native is not None
    lay = items[0][1][0]._lay
    args = lay.merge_args()
    while left >= 0:
        merge_encoded_into(*items[left])
        left = _native.merge_many(items, left + 1, lay, *args)


def merge_encoded_python(blob: bytes | str, targets: Sequence[LatencyHistogram]) -> None:
    """`merge_encoded_into` without the C call.

    Decodes into a reused array (`_DecodeBuffer`) and adds only the index range that holds counts: hdrh's
    `decode_and_add` allocates a histogram and adds the whole 23k-slot array, several times slower (`python -m
    bench.hotpath` prints both); this is the master's hot path (every worker's every histogram, every report
    interval).
    """
    lay = targets[0]._lay
    if blob == lay.empty_blob or blob == lay.empty_wire:
        return  # an empty histogram (a worker's health ships its schedule slip, empty in closed loop, every report)
    data = payload(blob)
    if data is None or payload_layout(data) != (0, *lay.key):
        # Not a V2 blob (hdrh checks it and complains), or another bucket layout (mapped value by value, as hdrh does).
        decoded = LatencyHistogram.decode(blob)
        for t in targets:
            t.merge(decoded)
        return
    counts_len = lay.counts_len
    scratch = _DECODE_BUFFER.at_least(counts_len)
    try:
        total, lo, hi = hdr.decode_counts(data, scratch, counts_len)
    except BaseException:  # a corrupt payload may have written counts before it failed: none may outlive the call
        ctypes.memset(scratch, 0, 8 * counts_len)
        raise
    if not total:
        return
    n = hi - lo + 1
    lowest_at, highest_at = lay.slot_values()
    lo_value, hi_value = lowest_at[lo], highest_at[hi]
    try:
        for t in targets:
            counts = t._cover(lo, hi)
            add_counts(counts, lo - t._off, scratch, lo, n)
            t._note(total, lo_value, hi_value)
    finally:
        ctypes.memset(ctypes.addressof(scratch) + 8 * lo, 0, 8 * n)
