"""Mergeable latency histograms with a stated relative error.

HDR histograms (hdrhistogram) of durations in integer microseconds, 1 µs … 1 h, 3 significant digits: any reported
percentile is within 0.1 % of the true sample value. They merge by adding counts, so workers ship a V2-encoded
snapshot per interval instead of raw samples, and the master's result equals one histogram of every sample.
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Sequence

from hdrh.histogram import HdrHistogram

from loadgen.measure import _hdr_internals as hdr
from loadgen.measure.chunk_gaps import record_chunk_gaps
from loadgen.measure.hdr_layout import DIGITS as _DIGITS
from loadgen.measure.hdr_layout import LOWEST_US as _LOWEST_US
from loadgen.measure.hdr_layout import Layout, add_counts, layout_for
from loadgen.measure.hist_blob import canonical
from loadgen.metric_names import PERCENTILES

__all__ = [
    "LatencyHistogram",
    "RELATIVE_ERROR",
    "PERCENTILES",
    "record_chunk_gaps",
]

RELATIVE_ERROR = 10.0**-_DIGITS
# Counts summed per step by `percentiles_ms` (one C-level sum), and per sub-step inside a block that holds a rank.
_WALK_BLOCK = 2048
_WALK_SUB = 64
# A histogram's window of slots grows in steps of this many (2 KiB): few regrowths, little held beyond its values.
_WINDOW_STEP_MASK = 255


class LatencyHistogram:
    """Durations in µs, 1 µs … 1 h, 3 significant digits by default; `digits` / `highest_s` give a coarser, smaller
    one (the loop-lag health histogram: 2 digits up to 60 s).

    hdrh's bucket layout and arithmetic, but only the window of slots the values fall in is held (a ctypes array
    from slot `_off`, grown in 256-slot steps as values arrive; none while empty): a whole 3-digit layout is 23,552
    slots (184 KiB), and a latency spans a few thousand of them, so a master with 10 variants × 5 mixes holds a
    fraction of what hdrh's full arrays took. Counts, total, min and max are hdrh's exactly (tests hold them equal
    to an hdrh histogram of the same values: tests/unit/test_histogram_window.py)."""

    __slots__ = ("_lay", "_counts", "_off", "_total", "_min", "_max")

    def __init__(self, *, digits: int = _DIGITS, highest_s: float = 3600.0, _layout: Layout | None = None) -> None:
        self._lay = _layout if _layout is not None else layout_for(_LOWEST_US, int(highest_s * 1e6), digits)
        self._counts: ctypes.Array[ctypes.c_int64] | None = None
        self._off = 0
        self._total = 0
        self._min = sys.maxsize  # hdrh's bookkeeping: the lowest and highest value recorded
        self._max = 0

    def _cover(self, lo: int, hi: int) -> ctypes.Array[ctypes.c_int64]:
        """The counts array, grown (when needed) to hold slots `lo` … `hi`."""
        counts = self._counts
        off = self._off
        if counts is not None and lo >= off and hi < off + len(counts):
            return counts
        if counts is not None:
            lo, hi = min(lo, off), max(hi, off + len(counts) - 1)
        start = lo & ~_WINDOW_STEP_MASK
        end = min((hi | _WINDOW_STEP_MASK) + 1, self._lay.counts_len)
        grown = (ctypes.c_int64 * (end - start))()
        if counts is not None:
            ctypes.memmove(ctypes.addressof(grown) + 8 * (off - start), ctypes.addressof(counts), 8 * len(counts))
        self._counts, self._off = grown, start
        return grown

    def _add_slots(self, slot_counts: dict[int, int], n: int, lo_value: int, hi_value: int) -> None:
        """Add counts per slot (`n` in all, of values `lo_value` … `hi_value`)."""
        if not slot_counts:
            return
        counts = self._cover(min(slot_counts), max(slot_counts))
        off = self._off
        for i, c in slot_counts.items():
            counts[i - off] += c
        self._note(n, lo_value, hi_value)

    def _note(self, n: int, lo: int, hi: int) -> None:
        self._total += n
        if lo < self._min:
            self._min = lo
        if hi > self._max:
            self._max = hi

    def record(self, seconds: float, count: int = 1) -> None:
        lay = self._lay
        us = int(seconds * 1e6 + 0.5)
        top = lay.key[1]
        if us < 0:
            us = 0  # clock oddities must not raise on the hot path
        elif us > top:
            us = top
        i = lay.index(us)
        counts, off = self._counts, self._off
        if counts is None or i < off or i >= off + len(counts):
            counts = self._cover(i, i)
            off = self._off
        counts[i - off] += count
        self._note(count, us, us)

    @property
    def count(self) -> int:
        return self._total

    def _min_value(self) -> int:
        """hdrh's `get_min_value` (µs): 0 when slot 0 holds a count or nothing was recorded."""
        counts = self._counts
        if not self._total or (self._off == 0 and counts is not None and counts[0] > 0):
            return 0
        if self._min == sys.maxsize:
            return sys.maxsize
        return self._lay.value_at(self._lay.index(self._min))

    def _max_value(self) -> int:
        """hdrh's `get_max_value` (µs): the highest equivalent of the highest value recorded."""
        return self._lay.highest_of(self._max) if self._max else 0

    def merge(self, other: LatencyHistogram) -> None:
        """Add `other` (hdrh's `add`: the same counts, total, min and max — min included, which hdrh lowers to 0
        when either side is empty)."""
        if other._lay is not self._lay:
            # Another layout: each of its slots re-recorded at its lowest value, as hdrh's slow path does.
            lay = other._lay
            for j, c in enumerate(other._counts or ()):
                if c:
                    self.record(lay.value_at(other._off + j) / 1e6, c)
            return
        src = other._counts
        if src is not None:
            counts = self._cover(other._off, other._off + len(src) - 1)
            add_counts(counts, other._off - self._off, src, 0, len(src))
        self._total += other._total
        self._max = max(self._max, other._max_value())
        self._min = min(self._min_value(), other._min_value())

    def to_hdrh(self) -> HdrHistogram:
        """An hdrh histogram of the same counts, total, min and max (a whole-layout array: for tests and tools)."""
        lowest, highest, digits = self._lay.key
        h = HdrHistogram(lowest, highest, digits)
        if self._counts is not None:
            add_counts(hdr.counts(h), self._off, self._counts, 0, len(self._counts))
        h.total_count, h.min_value, h.max_value = self._total, self._min, self._max
        return h

    def encode(self) -> bytes:
        """Compressed, base64 HdrHistogram V2 encoding (portable to other HDR implementations): hdrh's own bytes."""
        if self._counts is None:
            return self._lay.empty_blob
        return self._lay.encode(self._counts, self._off, self._total, self._min, self._max)

    def wire(self) -> bytes:
        """As the wire carries it: `encode()`'s V2 payload before zlib and base64 (`Layout.wire`; the forms a
        histogram travels in: measure/hist_blob.py)."""
        if self._counts is None:
            return self._lay.empty_wire
        return self._lay.wire(self._counts, self._off, self._total, self._min, self._max)

    @classmethod
    def decode(cls, blob: bytes | str) -> LatencyHistogram:
        h = HdrHistogram.decode(canonical(blob))
        out = cls(_layout=layout_for(h.lowest_trackable_value, h.highest_trackable_value, h.significant_figures))
        out._total, out._min, out._max = hdr.recorded(h)
        if out._total:  # decoding set min and max to the lowest and highest slot with a count
            lo, hi = out._lay.index(out._min), min(out._lay.index(out._max), out._lay.counts_len - 1)
            add_counts(out._cover(lo, hi), lo - out._off, hdr.counts(h), lo, hi - lo + 1)
        return out

    def _bounds(self) -> tuple[int, int, int] | None:
        """(total count, first slot, last slot) of what the walks below go over, the slots of the lowest and highest
        value recorded (clamped to the window: nothing is outside it), or None when empty."""
        counts = self._counts
        if not self._total or counts is None:
            return None
        lay, off = self._lay, self._off
        lo = max(lay.index(self._min), off)
        hi = min(lay.index(self._max), lay.counts_len - 1, off + len(counts) - 1)
        return self._total, lo, hi

    recorded_slots = _bounds

    @property
    def layout(self) -> Layout:
        return self._lay

    def counts_window(self) -> tuple[int, ctypes.Array[ctypes.c_int64] | None]:
        """(first slot held, the counts array from it; None while nothing was recorded), to read in place: the
        array is replaced, not resized, when the window grows."""
        return self._off, self._counts

    def _span(self) -> tuple[int, int, list[int]] | None:
        """(total count, first slot, the counts of the slots `_bounds` gives) or None when empty."""
        b = self._bounds()
        if b is None or self._counts is None:
            return None
        n, lo, hi = b
        return n, lo, self._counts[lo - self._off : hi + 1 - self._off]

    def percentile(self, p: float) -> float:
        """Seconds. The value reported is the upper edge of the sample's bucket (≤ 0.1 % above it); hdrh's
        `get_value_at_percentile` (its rank, its edge)."""
        span = self._span()
        if span is None:
            return 0.0
        n, lo, seg = span
        target = max(int(min(p, 100.0) * n / 100 + 0.5), 1)
        total = 0
        lay = self._lay
        for j, c in enumerate(seg):
            total += c
            if total >= target:
                v = lay.value_at(lo + j)
                return (lay.highest_of(v) if p else v) / 1e6
        return 0.0

    def mean(self) -> float:
        span = self._span()
        if span is None:
            return 0.0
        n, lo, seg = span
        value_at, median_of = self._lay.value_at, self._lay.median_of
        return float(sum(c * median_of(value_at(lo + j)) for j, c in enumerate(seg) if c)) / n / 1e6

    def max(self) -> float:
        return self._max_value() / 1e6

    def min(self) -> float:
        return self._min_value() / 1e6

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
        span = self._span()
        if span is None:
            if censored:
                return {
                    "count": 0,
                    "censored": censored,
                    "mean": None,
                    **{k: None for k, _ in PERCENTILES},
                    "max": None,
                }
            return {"count": 0}
        n, lo, seg = span
        total_n = n + censored
        targets = [(max(int(p * total_n / 100 + 0.5), 1), name) for name, p in PERCENTILES]
        found: dict[str, int] = {}
        total = weighted = ti = 0
        lay = self._lay
        value_at, median_of, highest_of = lay.value_at, lay.median_of, lay.highest_of
        for j, c in enumerate(seg):
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
        span = self._span()
        if span is None:
            return 0
        _, lo, seg = span
        bound_us = seconds * 1e6
        value_at, highest_of = self._lay.value_at, self._lay.highest_of
        return sum(c for j, c in enumerate(seg) if c and highest_of(value_at(lo + j)) > bound_us)

    def buckets_us(self) -> tuple[list[int], list[int]]:
        """Every non-empty bucket as (value µs, count), ascending: the distribution to resample (report/compare.py).
        The value is the bucket's highest equivalent, the one `percentile` reports."""
        span = self._span()
        if span is None:
            return [], []
        _, lo, seg = span
        value_at, highest_of = self._lay.value_at, self._lay.highest_of
        values, counts = [], []
        for j, c in enumerate(seg):
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
        span = self._span()
        if span is None:
            return []
        n, lo, seg = span
        total_n = n + censored
        fractions = sorted({i / points for i in range(1, points + 1)} | {0.995, 0.999, 0.9999})
        targets = [(max(int(f * total_n + 0.5), 1), f) for f in fractions]
        targets = [(rank, f) for rank, f in targets if rank <= n]
        out: list[list[float]] = []
        value_at, highest_of = self._lay.value_at, self._lay.highest_of
        total = ti = 0
        for j, c in enumerate(seg):
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
        out: list[float | None] = [None] * len(ps)
        b = self._bounds()
        counts = self._counts
        if b is None or counts is None:
            return out
        n, lo, hi = b
        off = self._off  # slot j + off is counts[j]
        lo, hi = lo - off, hi - off
        total_n = n + censored
        targets = sorted((max(int(p * total_n / 100 + 0.5), 1), i) for i, p in enumerate(ps))
        value_at, highest_of = self._lay.value_at, self._lay.highest_of
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
                            out[targets[ti][1]] = round(highest_of(value_at(off + j + k)) / 1e3, 4)
                            ti += 1
                j = sub_end
        return out
