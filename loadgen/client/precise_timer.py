"""Waking the event loop at an absolute monotonic time, to the tens of microseconds.

The open-loop dispatcher must send each arrival at its scheduled time. A gevent timer cannot: libev's epoll backend
rounds the poll timeout up to whole milliseconds, so a `gevent.sleep` wakes 0.5 ms late on average and up to a
millisecond or more (measured 0.58 ms p50 on a 2-core VM, `python -m bench.openloop` has the numbers). A Linux
`timerfd` armed at the absolute time turns readable on the kernel's high-resolution timer, and the loop's poll
returns as soon as it does, whatever its own timeout: the wake-up is as precise as the kernel's scheduling, and no
greenlet spins (a busy-wait would keep the worker's CPU at 100 % and fail its own health check).

`timerfd_create` / `timerfd_settime` are called through ctypes (Python has `os.timerfd_*` only from 3.13); with
loadgen's C half built, re-arming goes through `_wire.arm_timer` instead (one syscall: the ctypes call costs ~3 µs,
and the open-loop dispatcher re-arms for every arrival). Where they are missing (not Linux), `PreciseTimer` falls
back to gevent's timer, refreshing the loop's cached clock first so it never wakes early, and says so in `precise`.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import gevent
from gevent import get_hub

from loadgen.protocol.native import fast_path_available
from loadgen.protocol.native import wire as _wire

__all__ = ["PreciseTimer"]

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = 0o2000000
_TFD_TIMER_ABSTIME = 1
_TOP_PRIORITY = 2  # libev's EV_MAXPRI


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


def _libc() -> Any | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.timerfd_settime.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)
    except (OSError, AttributeError):
        return None
    return libc


class PreciseTimer:
    """`sleep_until(t)` blocks the calling greenlet until `time.monotonic() >= t` (never earlier), letting every
    other greenlet run meanwhile; `call_at(t, f)` runs `f` in the loop then, without a greenlet. One waiter or call
    at a time (the fd has one expiry); `close()` releases the fd."""

    __slots__ = ("_libc", "_fd", "_spec", "_watcher", "_fallback", "_call", "_arm_c", "precise")

    def __init__(self) -> None:
        self._libc = _libc()
        self._fd = -1
        if self._libc is not None:
            self._fd = self._libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        self.precise = self._fd >= 0
        self._spec = _Itimerspec()
        # The C half's re-arm, chosen once per timer (a check per arrival would cost what it saves).
        self._arm_c: Any = _wire.arm_timer if self.precise and fast_path_available() else None
        # Top priority: see call_at. A greenlet's sleep_until is woken by it just as soon.
        self._watcher = get_hub().loop.io(self._fd, 1, priority=_TOP_PRIORITY) if self.precise else None
        self._fallback: Any = None
        self._call: tuple[float, Callable[[], None]] | None = None

    def sleep_until(self, at: float) -> None:
        if self.precise:
            self._arm_and_wait(at)
        # The fallback, and a guard for the fd path: a timer may not return before `at` on the monotonic clock.
        loop = get_hub().loop
        while (delay := at - time.monotonic()) > 0:
            loop.update_now()  # the loop's cached clock may be stale (earlier): its timer would fire early
            gevent.sleep(delay)

    def _set(self, at: float) -> bool:
        """The timerfd armed to expire once at `at` (absolute); False where the kernel refused."""
        if self._arm_c is not None:
            return bool(self._arm_c(self._fd, at))
        sec = int(at)
        value = self._spec.it_value
        value.tv_sec = sec
        value.tv_nsec = max(1, int((at - sec) * 1e9))  # 0 would disarm the timer
        assert self._libc is not None
        return bool(self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) == 0)

    def _arm_and_wait(self, at: float) -> None:
        if at <= time.monotonic():
            return
        assert self._watcher is not None
        if not self._set(at):
            return  # the guard loop in sleep_until waits instead
        get_hub().wait(self._watcher)
        with contextlib.suppress(BlockingIOError):
            os.read(self._fd, 8)  # the expiry count: reading it makes the fd unreadable until the next expiry

    def call_at(self, at: float, callback: Callable[[], None]) -> None:
        """Run `callback()` in the event loop itself (the hub, not a greenlet) once `time.monotonic() >= at`, in
        place of any call armed before. With the timerfd its watcher has the loop's top priority: in the iteration
        whose poll saw the expiry it runs before the callbacks of the sockets that became readable with it, and
        what it switches to (an open-loop sender) runs there too, not after them. The callback must not block.
        Re-arming costs one `timerfd_settime`: the watcher stays started between calls (starting and stopping it
        would change the loop's epoll set every time). A timer serves `call_at` or `sleep_until`, not both."""
        self._call = (at, callback)
        if self.precise and self._set(at):
            assert self._watcher is not None
            if not self._watcher.active:
                self._watcher.start(self._expired)
            return
        if self._fallback is not None:
            self._fallback.close()
        loop = get_hub().loop
        loop.update_now()
        self._fallback = loop.timer(max(0.0, at - time.monotonic()))
        self._fallback.start(self._expired)

    def _expired(self) -> None:
        if self.precise:
            with contextlib.suppress(BlockingIOError):
                os.read(self._fd, 8)
        call = self._call
        if call is None:
            return
        at, callback = call
        if time.monotonic() < at:
            # Never early: a coarse fallback timer may fire before its time (the timerfd is armed for it already).
            if self._fallback is not None:
                self.call_at(at, callback)
            return
        self._call = None
        callback()

    def cancel(self) -> None:
        """Forget the call armed by `call_at` (none: nothing happens)."""
        self._call = None
        if self._fallback is not None:
            self._fallback.close()
            self._fallback = None

    def close(self) -> None:
        self.cancel()
        if self._watcher is not None:
            self._watcher.stop()
            self._watcher.close()
            self._watcher = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self.precise = False
