"""The wall-clock offset a worker converts its monotonic times with: read from the tightest of a few bracketed
clock reads (a read preempted between its two calls is not taken), kept for a second, then read again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loadgen.measure import wall_clock
from loadgen.measure.wall_clock import WallClock


class _Clocks:
    """Scripted clocks: `monotonic()` and `time()` return their next values in turn."""

    def __init__(self, mono: list[float], wall: list[float]) -> None:
        self._mono: Iterator[float] = iter(mono)
        self._wall: Iterator[float] = iter(wall)

    def monotonic(self) -> float:
        return next(self._mono)

    def time(self) -> float:
        return next(self._wall)


def _install(monkeypatch: pytest.MonkeyPatch, clocks: _Clocks) -> None:
    monkeypatch.setattr(wall_clock.time, "monotonic", clocks.monotonic)
    monkeypatch.setattr(wall_clock.time, "time", clocks.time)


def test_the_tightest_bracket_sets_the_offset_and_a_preempted_read_is_not_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # True offset 1000.0. Read 1 is preempted 5 ms between its monotonic and wall calls (the wall lands late: it
    # alone would give 1000.005 - ~0.0025); read 2 is tight; read 3 is preempted after its wall call.
    mono = [10.0, 10.0, 10.005, 10.010, 10.010001, 10.020, 10.024]
    wall = [1010.005, 1010.0100005, 1010.020]
    _install(monkeypatch, _Clocks(mono, wall))
    clock = WallClock(every_s=1.0)
    assert clock.offset() == pytest.approx(1000.0, abs=1e-6)


def test_the_offset_is_kept_for_its_period_then_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    first = [5.0] + [5.0, 5.0] * 3  # the check, then three tight reads (two monotonic calls each) at offset 100
    kept = [5.5]  # within the second: no read
    again = [6.1] + [6.1, 6.1] * 3  # past it: read again, the wall clock was stepped by +2 s
    _install(monkeypatch, _Clocks(first + kept + again, [105.0] * 3 + [108.1] * 3))
    clock = WallClock(every_s=1.0)
    assert clock.offset() == pytest.approx(100.0)
    assert clock.offset() == pytest.approx(100.0)
    assert clock.offset() == pytest.approx(102.0)
