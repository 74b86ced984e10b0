"""What this process's monotonic times are on the wall clock (reports and traces carry wall times: workers on several
hosts share no monotonic clock).

The offset is read as wall − monotonic from back-to-back clock reads. Read per request, a process preempted between
the two calls (a busy core, a stalled VM: milliseconds) shifted that one request's wall times by the stall — a CI
run saw sends 1 ms out of step with their own records. So the offset comes from the tightest of a few bracketed
reads (monotonic, wall, monotonic) and is kept for a second: a stepped or slewed wall clock is followed within it.
"""

from __future__ import annotations

import time

__all__ = ["WALL_CLOCK", "WallClock"]


class WallClock:
    __slots__ = ("_every", "_next", "_offset")

    def __init__(self, every_s: float = 1.0) -> None:
        self._every = every_s
        self._next = -float("inf")
        self._offset = 0.0

    def offset(self) -> float:
        """Seconds to add to a `time.monotonic()` value of this process to get wall-clock seconds."""
        if time.monotonic() >= self._next:
            self._read()
        return self._offset

    def _read(self) -> None:
        best_width, offset, after = float("inf"), 0.0, 0.0
        for _ in range(3):
            before = time.monotonic()
            wall = time.time()
            after = time.monotonic()
            if after - before < best_width:
                best_width, offset = after - before, wall - (before + after) / 2
        self._offset, self._next = offset, after + self._every


# One per process: the worker's recorder and the latency samples convert with the same offset.
WALL_CLOCK = WallClock()
