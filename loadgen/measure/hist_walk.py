"""One walk over an HDR histogram's recorded slots: the cumulative counts at bucket bounds, the total of count ×
median value, and the slots where quantile ranks are reached (what the Prometheus exporter serves).

In C where it is built (`_hist_walk.c`, one pass, imported here and nowhere else), else the same in numpy; both
give equal answers on every input (tests/unit/test_hist_walk.py), and LOADGEN_PURE_PYTHON=1 switches the C off.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loadgen.pure_python import pure_python

__all__ = ["Scratch", "native_available", "walk", "walk_numpy"]

try:
    from loadgen.measure import _hist_walk as _native
except ImportError:  # pragma: no cover - a build without a C compiler
    _native = None  # type: ignore[assignment]  # (a C build may be absent)


def native_available() -> bool:
    """Whether the C walk is built and not switched off (LOADGEN_PURE_PYTHON=1)."""
    return _native is not None and not pure_python()


class Scratch:
    """Reused arrays for the numpy walk of one layout (`slots` counts): fresh arrays per walk add memory traffic."""

    __slots__ = ("cum", "product")

    def __init__(self, slots: int) -> None:
        self.cum = np.zeros(slots + 1, dtype=np.int64)
        self.product = np.zeros(slots, dtype=np.int64)


def walk_numpy(
    counts: np.ndarray, lo: int, hi: int, ends: np.ndarray, median: np.ndarray, ranks: Sequence[int], scratch: Scratch
) -> tuple[list[int], int, int, list[int]]:
    """(per bound: samples in slots [lo, end); samples in [lo, hi]; Σ count × median; per rank: the first slot whose
    running count reaches it, or -1 past hi)."""
    seg = counts[lo : hi + 1]
    size = len(seg)
    # cum[i] = samples in slots lo … lo + i - 1: cum[0] = 0 stands for a bound below every recorded slot.
    cum = scratch.cum[: size + 1]
    seg.cumsum(out=cum[1:])  # (the ndarray methods: numpy's module functions add a wrapper per call)
    recorded = int(cum[-1])
    # (np.clip's wrapper costs more than the clipping here)
    buckets = cum.take(np.minimum(np.maximum(ends - lo, 0), size)).tolist()
    # In integer µs: exact. Not `seg @ median`: were these floats, a BLAS dot may wake its thread pool, which spins on
    # the cores the workers need.
    product = scratch.product[:size]
    np.multiply(seg, median[lo : hi + 1], out=product)
    total = int(product.sum())
    pos = cum.searchsorted(list(ranks), side="left").tolist()
    return buckets, recorded, total, [lo + j - 1 if j <= size else -1 for j in pos]


def walk(
    counts: np.ndarray, lo: int, hi: int, ends: np.ndarray, median: np.ndarray, ranks: Sequence[int], scratch: Scratch
) -> tuple[list[int], int, int, list[int]]:
    """`walk_numpy`, in C where built. `counts`, `ends`, `median`: int64 arrays; `ranks` ascending, ≥ 1."""
    if native_available():
        return _native.walk(counts, lo, hi, ends, median, ranks)
    return walk_numpy(counts, lo, hi, ends, median, ranks, scratch)
