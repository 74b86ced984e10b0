"""Mergeable latency histograms with a stated relative error.

HDR histograms (hdrhistogram) of durations in integer microseconds, 1 µs … 1 h, 3 significant digits: any reported
percentile is within 0.1 % of the true sample value. They merge by adding counts, so workers ship a compressed
snapshot per interval instead of raw samples, and the master's result equals one histogram of every sample.
"""

from __future__ import annotations

from hdrh.histogram import HdrHistogram

__all__ = ["LatencyHistogram", "RELATIVE_ERROR", "PERCENTILES"]

_LOWEST_US = 1
_HIGHEST_US = 3_600_000_000
_DIGITS = 3
RELATIVE_ERROR = 10.0**-_DIGITS
PERCENTILES: tuple[tuple[str, float], ...] = (
    ("p50", 50.0),
    ("p90", 90.0),
    ("p95", 95.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
)


class LatencyHistogram:
    __slots__ = ("_h",)

    def __init__(self, _h: HdrHistogram | None = None) -> None:
        self._h = _h if _h is not None else HdrHistogram(_LOWEST_US, _HIGHEST_US, _DIGITS)

    def record(self, seconds: float, count: int = 1) -> None:
        us = int(seconds * 1e6 + 0.5)
        if us < 0:
            us = 0  # clock oddities must not raise on the hot path
        elif us > _HIGHEST_US:
            us = _HIGHEST_US
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
        self._h.decode_and_add(blob)

    def percentile(self, p: float) -> float:
        """Seconds. The value reported is the upper edge of the sample's bucket (≤ 0.1 % above it)."""
        return self._h.get_value_at_percentile(p) / 1e6

    def mean(self) -> float:
        return float(self._h.get_mean_value()) / 1e6

    def max(self) -> float:
        return self._h.get_max_value() / 1e6

    def min(self) -> float:
        return self._h.get_min_value() / 1e6

    def summary_ms(self) -> dict[str, float | int]:
        """count, mean, p50 … p99.9, max in milliseconds; empty histogram → count 0 only."""
        n = self.count
        if n == 0:
            return {"count": 0}
        out: dict[str, float | int] = {"count": n, "mean": round(self.mean() * 1e3, 4)}
        for name, p in PERCENTILES:
            out[name] = round(self.percentile(p) * 1e3, 4)
        out["max"] = round(self.max() * 1e3, 4)
        return out

    def cdf_ms(self, points: int = 100) -> list[tuple[float, float]]:
        """(latency ms, cumulative fraction) pairs for plotting."""
        n = self.count
        if n == 0:
            return []
        out = []
        for i in range(1, points + 1):
            p = 100.0 * i / points
            out.append((round(self.percentile(min(p, 100.0)) * 1e3, 4), p / 100.0))
        return out
