"""Per-variant timeline of a run: what each wall-clock bin of each variant held, mergeable across workers.

A bin keeps exact sums (counts, integer microseconds), never derived values, so adding two workers' bins gives the
bin of all their requests: successes and errors by class counted where a request completed; output tokens where
their chunks arrived (a long stream's tokens spread over the seconds it streamed, which is what tokens/s over time
means); TTFT and E2E as count, sum and max of the requests that completed in the bin, and a small histogram of
each (measure/bin_histogram.py: within 1 %, at most a few KB) for the bin's p50 and p99.

Bins are 1 s wide on the workers. On the master a long run coarsens them: whenever a variant's bins would span more
than `MAX_BINS`, the width doubles (1, 2, 4 … s, aligned at multiples of the width from the epoch, so coarser bins
are unions of finer ones). Wire and report stay bounded by `MAX_BINS` per variant whatever the run's length, and the
result depends only on the data, not on the order reports arrived in.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Any

from loadgen.measure.bin_histogram import BinHistogram
from loadgen.measure.fates import FATES, FateRow, fate_of
from loadgen.measure.records import RequestRecord
from loadgen.pure_python import pure_python

try:
    from loadgen.measure import _hist_merge as _native
except ImportError:  # pragma: no cover
    _native = None  # type: ignore[assignment]  # (a C build may be absent)

__all__ = ["BIN_PERCENTILES", "MAX_BINS", "Bin", "Timeline"]

MAX_BINS = 512

_INTS = ("ok", "output_tokens", "ttft_n", "ttft_sum_us", "ttft_max_us", "e2e_n", "e2e_sum_us", "e2e_max_us")
_MAXES = frozenset({"ttft_max_us", "e2e_max_us"})
_IS_MAX = tuple(name in _MAXES for name in _INTS)
# The percentiles a bin reports (nearest rank, as the report's HDR percentiles).
BIN_PERCENTILES = (("p50", 50.0), ("p99", 99.0))


@dataclass(slots=True)
class Bin:
    ok: int = 0
    output_tokens: int = 0
    ttft_n: int = 0
    ttft_sum_us: int = 0
    ttft_max_us: int = 0
    e2e_n: int = 0
    e2e_sum_us: int = 0
    e2e_max_us: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    ttft_hist: BinHistogram = field(default_factory=BinHistogram)
    e2e_hist: BinHistogram = field(default_factory=BinHistogram)

    def merge_row(self, row: list[Any]) -> None:
        """Add a wire row: the `_INTS` in order, the errors by class, then TTFT's and E2E's histograms (flat; a row
        from an older worker has none). The counters and errors in one C call where built (`merge_bin_row`: the
        final merge at 1,000 workers adds ~27 rows a worker), which leaves any row not all ints to this loop."""
        n = len(_INTS)
        if _native is None or pure_python() or not _native.merge_bin_row(self, _INTS, _IS_MAX, row):
            for name, value in zip(_INTS, row, strict=False):
                if name in _MAXES:
                    if value > getattr(self, name):
                        setattr(self, name, int(value))
                else:
                    setattr(self, name, getattr(self, name) + int(value))
            for k, c in row[n].items():
                self.errors[k] = self.errors.get(k, 0) + int(c)
        if len(row) > n + 2:
            self.ttft_hist.merge_wire(row[n + 1])
            self.e2e_hist.merge_wire(row[n + 2])

    def row(self) -> list[Any]:
        return [
            *(getattr(self, name) for name in _INTS),
            dict(self.errors),
            self.ttft_hist.to_wire(),
            self.e2e_hist.to_wire(),
        ]


def _us(seconds: float) -> int:
    return max(int(seconds * 1e6 + 0.5), 0)


class Timeline:
    """Bins per variant, keyed by the bin's start (whole seconds since the epoch, a multiple of `width_s`, one width
    for all variants so that they share a time axis)."""

    __slots__ = ("bins", "width_s", "_lo", "_hi")

    def __init__(self) -> None:
        self.bins: dict[str, dict[int, Bin]] = {}
        self.width_s = 1
        self._lo: int | None = None
        self._hi: int | None = None

    def _bin(self, variant: str, second: int) -> Bin:
        bins = self.bins.get(variant)
        if bins is None:
            bins = self.bins[variant] = {}
        key = second - second % self.width_s
        b = bins.get(key)
        if b is None:
            b = bins[key] = Bin()
            lo = key if self._lo is None or key < self._lo else self._lo
            hi = key if self._hi is None or key > self._hi else self._hi
            self._lo, self._hi = lo, hi
            width = self.width_s
            while (hi - lo) // width + 1 > MAX_BINS:
                width *= 2
            if width != self.width_s:
                self._coarsen(width)
                b = self.bins[variant][key - key % width]
        return b

    def _coarsen(self, width: int) -> None:
        self.width_s = width
        for variant, bins in self.bins.items():
            coarse: dict[int, Bin] = {}
            for key, b in bins.items():
                into = coarse.get(key - key % width)
                if into is None:
                    coarse[key - key % width] = b
                else:
                    into.merge_row(b.row())
            self.bins[variant] = coarse
        if self._lo is not None and self._hi is not None:
            self._lo -= self._lo % width
            self._hi -= self._hi % width

    def add(self, rec: RequestRecord, wall_time: float, window_start: float, row: FateRow | None = None) -> None:
        """One record, finished at `wall_time` (epoch seconds; its chunk times, on the monotonic clock, are placed
        in wall time by taking `done` as that moment). Its tokens count as `GroupStats` counts them (those that
        arrived at or after `window_start`, from any request, warm-up and cut-by-stop ones included), so the
        timeline's tokens add up to the report's; the rest only for a request its fate's row puts in the timeline."""
        self._add_tokens(rec, wall_time, window_start)
        if not (row or FATES[fate_of(rec)]).in_timeline:
            return
        b = self._bin(rec.variant, int(wall_time))
        if rec.error is not None:
            b.errors[rec.error] = b.errors.get(rec.error, 0) + 1
        else:
            b.ok += 1
            e2e = rec.e2e
            if e2e is not None:
                us = _us(e2e)
                b.e2e_n += 1
                b.e2e_sum_us += us
                if us > b.e2e_max_us:
                    b.e2e_max_us = us
                b.e2e_hist.record_us(us)
        ttft = rec.ttft
        if ttft is not None:
            us = _us(ttft)
            b.ttft_n += 1
            b.ttft_sum_us += us
            if us > b.ttft_max_us:
                b.ttft_max_us = us
            b.ttft_hist.record_us(us)

    def _add_tokens(self, rec: RequestRecord, wall_time: float, window_start: float) -> None:
        if not rec.streamed:  # a whole reply: its usage's tokens, at its end, when GroupStats counts them
            if rec.error is None and not rec.warmup and not rec.cut_by_stop:
                self._bin(rec.variant, int(wall_time)).output_tokens += rec.output_token_count
            return
        times, tokens = rec.chunk_times, rec.chunk_tokens
        start = 0 if not times or times[0] >= window_start else bisect_left(times, window_start)
        if start == len(times):
            return
        # What GroupStats adds for a successful request of the window: usage may count a token no chunk carried
        # (EOS with an empty delta); it goes with the last chunk.
        measured_ok = rec.error is None and not rec.warmup and not rec.cut_by_stop
        extra = max(rec.output_token_count - rec.tokens_received, 0) if measured_ok else 0
        offset = wall_time - (rec.done if rec.done is not None else times[-1])
        first, last = int(times[start] + offset), int(times[-1] + offset)
        if first == last:  # most streams: every chunk inside one second
            self._bin(rec.variant, first).output_tokens += sum(tokens[start:]) + extra
            return
        # One slice per second the stream spanned (a few), found by bisection: no per-chunk Python loop.
        for sec in range(first, last + 1):
            end = bisect_left(times, sec + 1 - offset, start) if sec < last else len(times)
            if end > start:
                self._bin(rec.variant, sec).output_tokens += sum(tokens[start:end]) + (extra if sec == last else 0)
            start = end

    def is_empty(self) -> bool:
        return not self.bins

    def to_wire(self) -> dict[str, Any]:
        rows = [[v, key, *b.row()] for v, bins in self.bins.items() for key, b in bins.items()]
        return {"w": self.width_s, "bins": rows}

    def merge_wire(self, wire: dict[str, Any]) -> None:
        width = int(wire.get("w", 1))
        if width > self.width_s:
            self._coarsen(width)
        for v, key, *row in wire.get("bins", ()):
            self._bin(v, int(key)).merge_row(row)

    def merge(self, other: Timeline) -> None:
        self.merge_wire(other.to_wire())

    def span(self) -> tuple[int, int] | None:
        """First and last bin start over every variant."""
        return None if self._lo is None or self._hi is None else (self._lo, self._hi)

    def report(self, variant: str) -> dict[str, Any]:
        """Columns for charts, one entry per bin over the whole timeline (empty bins included, so every variant of
        a report shares one time axis). Rates are per second of the bin."""
        span = self.span()
        bins = self.bins.get(variant, {})
        w = self.width_s
        rows = [bins.get(k) or Bin() for k in (range(span[0], span[1] + 1, w) if span else ())]
        classes = sorted({c for b in rows for c in b.errors})

        def mean_ms(total: int, n: int) -> float | None:
            return round(total / n / 1e3, 3) if n else None

        ps = tuple(p for _, p in BIN_PERCENTILES)
        ttft_ps = [b.ttft_hist.percentiles_ms(ps) for b in rows]
        e2e_ps = [b.e2e_hist.percentiles_ms(ps) for b in rows]
        return {
            "start_unix_s": span[0] if span else None,
            "bin_s": w,
            "ok": [b.ok for b in rows],
            "errors": {c: [b.errors.get(c, 0) for b in rows] for c in classes},
            "output_tokens_per_s": [round(b.output_tokens / w, 2) for b in rows],
            "ttft_mean_ms": [mean_ms(b.ttft_sum_us, b.ttft_n) for b in rows],
            "ttft_max_ms": [round(b.ttft_max_us / 1e3, 3) if b.ttft_n else None for b in rows],
            **{f"ttft_{name}_ms": [v[k] for v in ttft_ps] for k, (name, _) in enumerate(BIN_PERCENTILES)},
            "e2e_mean_ms": [mean_ms(b.e2e_sum_us, b.e2e_n) for b in rows],
            "e2e_max_ms": [round(b.e2e_max_us / 1e3, 3) if b.e2e_n else None for b in rows],
            **{f"e2e_{name}_ms": [v[k] for v in e2e_ps] for k, (name, _) in enumerate(BIN_PERCENTILES)},
        }
