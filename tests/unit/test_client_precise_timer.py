"""The open-loop dispatcher's timer: it never returns before the time asked, lets other greenlets run while it
waits, and keeps that promise on the gevent fallback too. (How late it wakes is a benchmark's number, not a test's:
`python -m bench.openloop`.)"""

from __future__ import annotations

import ctypes
import os
import sys
import time

import gevent
import gevent.event
import pytest

from loadgen.client import precise_timer
from loadgen.client.precise_timer import PreciseTimer
from loadgen.protocol.native import fast_path_available
from loadgen.protocol.native import wire as _wire


@pytest.fixture(params=["timerfd", "timerfd-ctypes", "fallback"])
def timer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> PreciseTimer:
    """The timerfd re-armed by the C half (where built), by ctypes, and gevent's timer where there is no timerfd."""
    if request.param == "fallback":
        monkeypatch.setattr(precise_timer, "_libc", lambda: None)
    if request.param == "timerfd-ctypes":
        monkeypatch.setenv("LOADGEN_PURE_PYTHON", "1")
    t = PreciseTimer()
    assert t.precise == (request.param != "fallback" and sys.platform.startswith("linux"))
    if request.param == "timerfd" and t.precise:
        assert (t._arm_c is not None) == fast_path_available()
    if request.param == "timerfd-ctypes":
        assert t._arm_c is None
    yield t
    t.close()


def _remaining_s(fd: int) -> float:
    """timerfd_gettime: how long until the timerfd `fd` expires (0: disarmed)."""
    libc = ctypes.CDLL(None, use_errno=True)
    spec = precise_timer._Itimerspec()
    assert libc.timerfd_gettime(fd, ctypes.byref(spec)) == 0
    return spec.it_value.tv_sec + spec.it_value.tv_nsec * 1e-9


@pytest.mark.skipif(_wire is None or not sys.platform.startswith("linux"), reason="the C half is not built here")
def test_the_c_re_arm_sets_the_expiry_the_ctypes_path_sets() -> None:
    c_timer = PreciseTimer()
    c_timer._arm_c = _wire.arm_timer  # (LOADGEN_PURE_PYTHON may be set for the whole run)
    py_timer = PreciseTimer()
    py_timer._arm_c = None
    try:
        at = time.monotonic() + 1000.0
        assert c_timer._set(at) and py_timer._set(at)
        c_left, py_left = _remaining_s(c_timer._fd), _remaining_s(py_timer._fd)
        # Both count down to the same absolute time: they differ by the time between the two reads, not by 1 s.
        assert 990 < c_left <= 1000 and 990 < py_left <= 1000 and abs(c_left - py_left) < 1
        # A time already past expires at once: armed (never 0 ns, which would disarm it), and readable.
        assert c_timer._set(1.0) and py_timer._set(1.0)
        assert _remaining_s(c_timer._fd) == 0 == _remaining_s(py_timer._fd)
        assert len(os.read(c_timer._fd, 8)) == 8 and len(os.read(py_timer._fd, 8)) == 8
    finally:
        c_timer.close()
        py_timer.close()
    # What the kernel or the clock cannot take is refused, not raised: the caller's guard waits instead.
    assert _wire.arm_timer(-1, time.monotonic() + 1) is False
    r, w = os.pipe()
    try:
        assert _wire.arm_timer(r, time.monotonic() + 1) is False  # not a timerfd
    finally:
        os.close(r)
        os.close(w)
    t = PreciseTimer()
    try:
        for bad in (-1.0, float("nan"), float("inf"), 1e300):
            assert _wire.arm_timer(t._fd, bad) is False, bad
        assert _remaining_s(t._fd) == 0  # none of them armed it
    finally:
        t.close()


def test_never_returns_before_the_time_asked(timer: PreciseTimer) -> None:
    early = []
    for i in range(200):
        at = time.monotonic() + (i % 7) * 1e-4  # 0 to 0.6 ms ahead, and some already due
        timer.sleep_until(at)
        early.append(at - time.monotonic())
    assert max(early) <= 0


def test_other_greenlets_run_while_it_waits(timer: PreciseTimer) -> None:
    ticks: list[float] = []

    def ticker() -> None:
        for _ in range(5):
            ticks.append(time.monotonic())
            gevent.sleep(0.002)

    g = gevent.spawn(ticker)
    at = time.monotonic() + 0.03
    timer.sleep_until(at)
    assert time.monotonic() >= at
    g.join()
    assert len(ticks) == 5 and ticks[-1] < at  # all of them ran inside the wait


def test_a_killed_waiter_leaves_the_timer_usable(timer: PreciseTimer) -> None:
    g = gevent.spawn(timer.sleep_until, time.monotonic() + 10)
    gevent.sleep(0.01)
    g.kill()
    at = time.monotonic() + 0.005
    timer.sleep_until(at)
    assert time.monotonic() >= at


def test_close_is_idempotent() -> None:
    t = PreciseTimer()
    t.close()
    t.close()
    assert not t.precise
    at = time.monotonic() + 0.002
    t.sleep_until(at)  # closed: the fallback still keeps time
    assert time.monotonic() >= at


def test_call_at_runs_in_the_loop_never_early_and_only_the_last_armed_call(timer: PreciseTimer) -> None:
    calls: list[tuple[str, float, bool]] = []
    hub = gevent.get_hub()

    def call(name: str, at: float) -> None:
        timer.call_at(at, lambda: calls.append((name, at - time.monotonic(), gevent.getcurrent() is hub)))

    now = time.monotonic()
    call("replaced", now + 0.002)
    call("kept", now + 0.004)  # re-armed before the first fell due: only this one runs
    gevent.sleep(0.02)
    assert [(n, early <= 0, in_hub) for n, early, in_hub in calls] == [("kept", True, True)]
    for i in range(30):  # one after another, each armed from the last one's call, some already due
        at = time.monotonic() + (i % 4) * 2e-4
        done = gevent.event.Event()
        timer.call_at(at, lambda at=at, done=done: (calls.append(("chain", at - time.monotonic(), True)), done.set()))
        assert done.wait(timeout=2)
    assert len(calls) == 31 and max(early for _, early, _ in calls) <= 0
    timer.call_at(time.monotonic() + 0.003, lambda: calls.append(("cancelled", 0.0, True)))
    timer.cancel()
    gevent.sleep(0.01)
    assert len(calls) == 31
