"""Mergeable latency histograms with a stated relative error.

HDR histograms (hdrhistogram) of durations in integer microseconds, 1 µs … 1 h, 3 significant digits: any reported
percentile is within 0.1 % of the true sample value. They merge by adding counts, so workers ship a compressed
snapshot per interval instead of raw samples, and the master's result equals one histogram of every sample.
"""

from __future__ import annotations

import base64
import ctypes
import itertools
import struct
import zlib
from array import array
from collections import Counter
from collections.abc import Sequence

from hdrh.histogram import HdrHistogram

from loadgen.measure import _hdr_internals as hdr
from loadgen.metric_names import PERCENTILES

__all__ = ["LatencyHistogram", "RELATIVE_ERROR", "PERCENTILES", "merge_encoded_into", "record_chunk_gaps"]

_LOWEST_US = 1
_HIGHEST_US = 3_600_000_000
_DIGITS = 3
RELATIVE_ERROR = 10.0**-_DIGITS
# Counts summed per step by `percentiles_ms` (one C-level sum), and per sub-step inside a block that holds a rank.
_WALK_BLOCK = 2048
_WALK_SUB = 64


# The bucket layout of HdrHistogram(1 µs, 1 h, 3 digits), for computing a value's counts index inline on the hot
# path: hdrh's record_value is several Python calls per value, the inline form one expression (`python -m
# bench.hotpath` prints what recording a request's chunk gaps costs). Checked against hdrh on first use
# (`_GapIndex.build`), not at import.
_SUB_HALF_MAG = 10  # sub_bucket_half_count_magnitude: 2 * 10**3 → 2048 sub-buckets
_SUB_MASK = (1 << (_SUB_HALF_MAG + 1)) - 1
_SHIFT0 = _SUB_HALF_MAG + 1
_SUB_HALF = 1 << _SUB_HALF_MAG
_V2_HEADER = struct.Struct(">ii")
_PAYLOAD_HEADER = struct.Struct(">IIIIQQ")  # cookie, length, normalizing offset, digits, lowest, highest


def _index(us: int) -> int:
    b = (us | _SUB_MASK).bit_length() - _SHIFT0
    return ((b + 1) << _SUB_HALF_MAG) + (us >> b) - _SUB_HALF


def _check_layout() -> None:
    h = HdrHistogram(_LOWEST_US, _HIGHEST_US, _DIGITS)
    hdr.check(h)
    assert hdr.layout_magnitudes(h) == (0, _SUB_HALF_MAG)
    for v in (0, 1, 2047, 2048, 4095, 4096, 123_456, _HIGHEST_US):
        assert hdr.index_for(h, v) == _index(v), v


class LatencyHistogram:
    """Durations in µs, 1 µs … 1 h, 3 significant digits by default; `digits` / `highest_s` give a coarser, smaller
    one (the loop-lag health histogram: 2 digits up to 60 s is 20 KB instead of 180 KB per worker on the master)."""

    __slots__ = ("_h",)

    def __init__(self, _h: HdrHistogram | None = None, *, digits: int = _DIGITS, highest_s: float = 3600.0) -> None:
        self._h = _h if _h is not None else HdrHistogram(_LOWEST_US, int(highest_s * 1e6), digits)

    def record(self, seconds: float, count: int = 1) -> None:
        us = int(seconds * 1e6 + 0.5)
        if us < 0:
            us = 0  # clock oddities must not raise on the hot path
        elif us > self._h.highest_trackable_value:
            us = self._h.highest_trackable_value
        self._h.record_value(us, count)

    @property
    def count(self) -> int:
        return int(self._h.get_total_count())

    def merge(self, other: LatencyHistogram) -> None:
        self._h.add(other._h)

    def encode(self) -> bytes:
        """Compressed, base64 HdrHistogram V2 encoding (portable to other HDR implementations)."""
        return bytes(self._h.encode())

    @classmethod
    def decode(cls, blob: bytes | str) -> LatencyHistogram:
        return cls(HdrHistogram.decode(blob))

    def merge_encoded(self, blob: bytes | str) -> None:
        merge_encoded_into(blob, (self,))

    def percentile(self, p: float) -> float:
        """Seconds. The value reported is the upper edge of the sample's bucket (≤ 0.1 % above it)."""
        return self._h.get_value_at_percentile(p) / 1e6

    def mean(self) -> float:
        return float(self._h.get_mean_value()) / 1e6

    def max(self) -> float:
        return self._h.get_max_value() / 1e6

    def min(self) -> float:
        return self._h.get_min_value() / 1e6

    def summary_ms(self, censored: int = 0) -> dict[str, float | int | None]:
        """count, mean, p50 … p99.9, max in milliseconds; empty histogram → count 0 only.

        `censored`: samples known only to lie above everything recorded (a request that failed before its first
        token has no TTFT, but it certainly did not come fast). They count in every rank: a percentile that falls
        among them, and the mean and max, are None ("censored"), so a p99 cannot pass because the slow requests
        died. `count` stays the number of recorded samples; `censored` is added when there are any.

        One pass over the recorded index range. hdrh's getters walk all 23k slots in Python once per percentile
        (and once more for the mean): for a report of many groups on the master's event loop, that adds up to
        seconds. Same values as hdrh's `get_value_at_percentile` / `get_mean_value` (a unit test holds them
        equal)."""
        h = self._h
        n, min_value, max_value = hdr.recorded(h)
        if n == 0:
            if censored:
                return {
                    "count": 0,
                    "censored": censored,
                    "mean": None,
                    **{k: None for k, _ in PERCENTILES},
                    "max": None,
                }
            return {"count": 0}
        lo = hdr.index_for(h, min_value)
        hi = min(hdr.index_for(h, max_value), hdr.counts_len(h) - 1)
        total_n = n + censored
        targets = [(max(int(p * total_n / 100 + 0.5), 1), name) for name, p in PERCENTILES]
        found: dict[str, int] = {}
        total = weighted = ti = 0
        value_at, median_of, highest_of = hdr.walkers(h)
        for j, c in enumerate(hdr.counts(h)[lo : hi + 1]):
            if not c:
                continue
            v = value_at(lo + j)
            weighted += c * median_of(v)
            total += c
            while ti < len(targets) and total >= targets[ti][0]:
                found[targets[ti][1]] = highest_of(v)
                ti += 1
        out: dict[str, float | int | None] = {"count": n, "mean": round(weighted / n / 1e3, 4)}
        for name, _ in PERCENTILES:
            at = found.get(name)
            out[name] = None if at is None and censored else round((at or 0) / 1e3, 4)
        out["max"] = round(self.max() * 1e3, 4)
        if censored:
            out["censored"] = censored
            out["mean"] = out["max"] = None
        return out

    def count_above(self, seconds: float) -> int:
        """Samples recorded above `seconds`, each valued as `percentile` reports it (its bucket's highest value, within
        0.1 %), so the count agrees with an SLO checked on a percentile of the same histogram."""
        h = self._h
        n, min_value, max_value = hdr.recorded(h)
        if n == 0:
            return 0
        bound_us = seconds * 1e6
        lo = hdr.index_for(h, min_value)
        hi = min(hdr.index_for(h, max_value), hdr.counts_len(h) - 1)
        value_at, _, highest_of = hdr.walkers(h)
        return sum(c for j, c in enumerate(hdr.counts(h)[lo : hi + 1]) if c and highest_of(value_at(lo + j)) > bound_us)

    def buckets_us(self) -> tuple[list[int], list[int]]:
        """Every non-empty bucket as (value µs, count), ascending: the distribution to resample (report/compare.py).
        The value is the bucket's highest equivalent, the one `percentile` reports."""
        h = self._h
        n, min_value, max_value = hdr.recorded(h)
        if n == 0:
            return [], []
        lo = hdr.index_for(h, min_value)
        hi = min(hdr.index_for(h, max_value), hdr.counts_len(h) - 1)
        value_at, _, highest_of = hdr.walkers(h)
        values, counts = [], []
        for j, c in enumerate(hdr.counts(h)[lo : hi + 1]):
            if c:
                values.append(highest_of(value_at(lo + j)))
                counts.append(c)
        return values, counts

    def cdf_ms(self, points: int = 100, censored: int = 0) -> list[list[float]]:
        """[latency ms, cumulative fraction] pairs for plotting: the value at `points` evenly spaced ranks, plus
        p99.5 / p99.9 / p99.99 (the tail a CDF is read for; 100 even steps put one point past p99), each as
        `percentile` gives it, in one pass over the counts like `summary_ms`. `censored` samples (above
        everything recorded) count in the ranks, so a metric with failed requests ends below 1, at the recorded
        share, where its last point is the max."""
        h = self._h
        n, min_value, max_value = hdr.recorded(h)
        if n == 0:
            return []
        total_n = n + censored
        fractions = sorted({i / points for i in range(1, points + 1)} | {0.995, 0.999, 0.9999})
        targets = [(max(int(f * total_n + 0.5), 1), f) for f in fractions]
        targets = [(rank, f) for rank, f in targets if rank <= n]
        out: list[list[float]] = []
        lo = hdr.index_for(h, min_value)
        hi = min(hdr.index_for(h, max_value), hdr.counts_len(h) - 1)
        value_at, _, highest_of = hdr.walkers(h)
        total = ti = 0
        for j, c in enumerate(hdr.counts(h)[lo : hi + 1]):
            if not c:
                continue
            total += c
            while ti < len(targets) and total >= targets[ti][0]:
                out.append([round(highest_of(value_at(lo + j)) / 1e3, 4), targets[ti][1]])
                ti += 1
        if censored:
            out.append([round(self.max() * 1e3, 4), round(n / total_n, 6)])
        return out

    def percentiles_ms(self, ps: Sequence[float], censored: int = 0) -> list[float | None]:
        """The values `summary_ms` gives for percentiles `ps` (ms; None where the rank falls among `censored`
        samples, or nothing was recorded), at a fraction of its cost: blocks of counts are summed in C, then
        sub-blocks of the block holding a rank, and only the sub-block holding it is walked in Python. For the live
        views, which ask for a few percentiles of every (variant, mix) every couple of seconds on the master's
        event loop."""
        h = self._h
        n, min_value, max_value = hdr.recorded(h)
        out: list[float | None] = [None] * len(ps)
        if n == 0:
            return out
        total_n = n + censored
        targets = sorted((max(int(p * total_n / 100 + 0.5), 1), i) for i, p in enumerate(ps))
        lo = hdr.index_for(h, min_value)
        hi = min(hdr.index_for(h, max_value), hdr.counts_len(h) - 1)
        value_at, _, highest_of = hdr.walkers(h)
        counts = hdr.counts(h)
        total = ti = 0
        j = lo
        while j <= hi and ti < len(targets):
            end = min(j + _WALK_BLOCK, hi + 1)
            s = sum(counts[j:end])
            if total + s < targets[ti][0]:
                total += s
                j = end
                continue
            # A rank falls in this block: narrow it down by sub-blocks, then walk one sub-block value by value.
            while j < end and ti < len(targets):
                sub_end = min(j + _WALK_SUB, end)
                sub = counts[j:sub_end]
                s = sum(sub)
                if total + s < targets[ti][0]:
                    total += s
                else:
                    for k, c in enumerate(sub):
                        if not c:
                            continue
                        total += c
                        while ti < len(targets) and total >= targets[ti][0]:
                            out[targets[ti][1]] = round(highest_of(value_at(j + k)) / 1e3, 4)
                            ti += 1
                j = sub_end
        return out


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


def record_chunk_gaps(
    itl: LatencyHistogram, icl: LatencyHistogram, times: Sequence[float], tokens: Sequence[int]
) -> None:
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
            ic, cc = hdr.counts(itl._h), hdr.counts(icl._h)
            for i, c in Counter([table[u] for u in gaps_us]).items():
                ic[i] += c
                cc[i] += c
            hdr.note_recorded(itl._h, n - 1, lo, hi)
            hdr.note_recorded(icl._h, n - 1, lo, hi)
            return
    hi_h, ci_h = itl._h, icl._h
    ic, cc = hdr.counts(hi_h), hdr.counts(ci_h)
    top = _HIGHEST_US
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
        cc[((b + 1) << _SUB_HALF_MAG) + (us >> b) - _SUB_HALF] += 1
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
        ic[((b + 1) << _SUB_HALF_MAG) + (us >> b) - _SUB_HALF] += k
        tok_total += k
        if us < lo_i:
            lo_i = us
        if us > hi_i:
            hi_i = us
    if gaps:
        hdr.note_recorded(ci_h, gaps, lo_c, hi_c)
    if tok_total:
        hdr.note_recorded(hi_h, tok_total, lo_i, hi_i)


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


def merge_encoded_into(blob: bytes | str, targets: Sequence[LatencyHistogram]) -> None:
    """Add one `encode()`d histogram to each of `targets`, decoding it once.

    Decodes into a reused array (`_DecodeBuffer`) and adds only the index range that holds counts: hdrh's
    `decode_and_add` allocates a histogram and adds the whole 23k-slot array, several times slower (`python -m
    bench.hotpath` prints both); this is the master's hot path (every worker's every histogram, every report
    interval).
    """
    raw = base64.b64decode(blob)
    cookie, length = _V2_HEADER.unpack_from(raw)
    if cookie & ~0xF0 != 0x1C849304 or 8 + length > len(raw):
        for t in targets:
            t._h.decode_and_add(blob)  # not a V2-compressed blob: let hdrh check it and complain
        return
    data = zlib.decompress(raw[8 : 8 + length])
    first = targets[0]._h
    _, _, offset, digits, lowest, highest = _PAYLOAD_HEADER.unpack_from(data)
    if (offset, digits, lowest, highest) != (0, first.significant_figures, first.lowest_trackable_value,
                                             first.highest_trackable_value):  # fmt: skip
        for t in targets:
            t._h.decode_and_add(blob)  # another bucket layout: hdrh maps it value by value
        return
    counts_len = hdr.counts_len(first)
    scratch = _DECODE_BUFFER.at_least(counts_len)
    total, lo, hi = hdr.decode_counts(data, scratch, counts_len)
    if not total:
        return
    n = hi - lo + 1
    try:
        for t in targets:
            h = t._h
            hdr.add_counts(h, scratch, lo, n)
            value_at, _, highest_of = hdr.walkers(h)
            hdr.note_recorded(h, total, value_at(lo), highest_of(value_at(hi)))
    finally:
        ctypes.memset(ctypes.addressof(scratch) + 8 * lo, 0, 8 * n)
