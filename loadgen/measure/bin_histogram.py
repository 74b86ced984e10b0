"""The small latency histogram each timeline bin keeps (measure/timeline.py), for the bin's p50 and p99.

Not the report's HDR histograms: at 3 significant digits those hold 2048 sub-buckets per power of two, tens of KB
each, and a copy per bin would multiply the master's memory and the wire by the number of bins. This is DDSketch's
scheme instead: bucket i holds the values in (γ^(i-1), γ^i] µs with γ = 1.02, read as 2·γ^i/(γ+1), so a percentile
is within 1 % of a sample's value (plus the µs the samples were rounded to).

Its counts are one dense array of 4-byte integers over the buckets between the lowest and highest value seen: the
latencies of one bin span a few hundred buckets at most (20 ms … 2 s is 232), and 1 µs … 1 h, the whole range, is
1,113 — at most 4.5 KB per histogram whatever the load, where a dict of the same counts would take ~80 bytes per
bucket. On the wire, only the buckets that hold a count travel, as (bucket, count) pairs; histograms merge by adding
counts, so two workers' bins add up to the bin of all their requests.
"""

from __future__ import annotations

import math
from array import array

from loadgen.pure_python import pure_python

try:  # the master's merge of a bin's histogram in one C call; optional, as every C half is
    from loadgen.measure import _hist_merge as _native
except ImportError:  # pragma: no cover - a build without a C compiler or zlib's headers
    _native = None  # type: ignore[assignment]  # (a C build may be absent)

__all__ = ["BinHistogram", "RELATIVE_ERROR"]

_GAMMA = 1.02
_LOG_GAMMA = math.log(_GAMMA)
RELATIVE_ERROR = (_GAMMA - 1) / (_GAMMA + 1)  # < 1 %


def _bucket(us: int) -> int:
    # (The epsilon keeps an exact power of γ in its own bucket despite the float logarithm.)
    return math.ceil(math.log(us) / _LOG_GAMMA - 1e-9) if us > 1 else 0


def _value_ms(i: int) -> float:
    return 2 * _GAMMA**i / (_GAMMA + 1) / 1e3


class BinHistogram:
    __slots__ = ("lo", "counts")

    def __init__(self) -> None:
        self.lo = 0  # the bucket of counts[0]
        self.counts = array("I")

    def _add(self, i: int, n: int) -> None:
        counts = self.counts
        if not counts:
            self.lo = i
            counts.append(0)
        elif i < self.lo:
            grown = array("I", bytes(4 * (self.lo - i)))
            grown.extend(counts)
            self.counts, self.lo = grown, i
        elif i >= self.lo + len(counts):
            counts.frombytes(bytes(4 * (i - self.lo - len(counts) + 1)))
        self.counts[i - self.lo] += n

    def record_us(self, us: int) -> None:
        self._add(_bucket(us), 1)

    def count(self) -> int:
        return sum(self.counts)

    def to_wire(self) -> list[int]:
        """(bucket, count, bucket, count, …) of the buckets that hold a count."""
        return [x for k, n in enumerate(self.counts) if n for x in (self.lo + k, n)]

    def merge_wire(self, flat: list[int]) -> None:
        if not flat:
            return  # (most bins of a delta hold no latency: no tokens ended a request in them)
        if _native is not None and type(flat) is list and not pure_python() and _native.merge_bin_pairs(self, flat):
            return  # in one C call (`_hist_merge.c`), which leaves any other form to the loop below
        keys, values = flat[0 : len(flat) - 1 : 2], flat[1::2]
        if not keys:
            return
        # Grown once to the lowest and highest bucket, then added inline: the master merges every worker's every
        # bin each interval, and a call per bucket was most of its merge time (bench/scale.py's merge part).
        self._add(int(min(keys)), 0)
        self._add(int(max(keys)), 0)
        counts, lo = self.counts, self.lo
        for k, n in zip(keys, values, strict=False):
            counts[int(k) - lo] += int(n)

    def percentiles_ms(self, ps: tuple[float, ...]) -> list[float | None]:
        """Percentiles (nearest rank: the ⌈p/100 · n⌉-th value) in ms, to the µs; None for each when empty."""
        n = self.count()
        if not n:
            return [None] * len(ps)
        ranks = [max(1, math.ceil(p / 100 * n - 1e-9)) for p in ps]
        out: list[float | None] = [None] * len(ps)
        seen = 0
        for k, c in enumerate(self.counts):
            if not c:
                continue
            seen += c
            for j, r in enumerate(ranks):
                if out[j] is None and seen >= r:
                    out[j] = round(_value_ms(self.lo + k), 3)
            if all(v is not None for v in out):
                break
        return out
