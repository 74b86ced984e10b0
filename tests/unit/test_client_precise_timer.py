"""The open-loop dispatcher's timer: it never returns before the time asked, lets other greenlets run while it
waits, and keeps that promise on the gevent fallback too. (How late it wakes is a benchmark's number, not a test's:
`python -m bench.openloop`.)"""

from __future__ import annotations

import sys
import time

import gevent
import gevent.event
import pytest

from loadgen.client import precise_timer
from loadgen.client.precise_timer import PreciseTimer


@pytest.fixture(params=["timerfd", "fallback"])
def timer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> PreciseTimer:
    if request.param == "fallback":
        monkeypatch.setattr(precise_timer, "_libc", lambda: None)
    t = PreciseTimer()
    assert t.precise == (request.param == "timerfd" and sys.platform.startswith("linux"))
    yield t
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
