"""Moving the kernel's receive stamps (realtime clock) onto the monotonic clock every loadgen timestamp uses.

The offset between the two clocks is read as realtime minus monotonic. Read naively (one call after the other), a
preemption or a thread switch between the two calls — a millisecond on a loaded 2-core VM, seen in CI — moves every
stamp of that wake-up by its length. So the realtime reading is bracketed by two monotonic ones and set against their
midpoint, and of a few tries the narrowest bracket is kept: the error is at most half of that bracket, and the first
try is almost always tight enough to stop at. `_wire.c`'s `realtime_offset` is this function in C.
"""

from __future__ import annotations

import time

__all__ = ["realtime_offset_ns"]

_TRIES = 4
# A bracket this narrow is good enough to stop at: each clock read is tens of ns through the vDSO.
_TIGHT_NS = 20_000


def realtime_offset_ns() -> tuple[int, int]:
    """(realtime − monotonic, the last monotonic reading), in ns; the offset is off by at most half the bracket."""
    mono, real = time.monotonic_ns, time.time_ns
    best = best_gap = after = 0
    for i in range(_TRIES):
        before = mono()
        r = real()
        after = mono()
        gap = after - before
        if i == 0 or gap < best_gap:
            best_gap, best = gap, r - before - gap // 2
        if gap <= _TIGHT_NS:
            break
    return best, after
