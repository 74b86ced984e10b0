"""Open-loop sending: one dispatcher per worker walks its share of the arrival schedule and hands each arrival, at
its time, to a free user of every variant.

Worker w of W sends its share, `schedule_arrivals(schedule, seed, w, W)`, as offsets from its run start (its
`test_start`, on the monotonic clock every record uses). Global arrival k is request k of the scenario's open-loop
request stream, so every variant gets the same request at the same offset (paired), and the requests sent over a
run, with their offsets, are the same whatever W. Users are the senders: a user waits for an
arrival, sends it, waits for the next (`Handoff` does the matching, `overflow` says what an arrival that finds
every user busy becomes). `RequestRecord.scheduled` is the arrival's absolute time, so queue delay is
`sent − scheduled`.

Nothing is lost silently: every arrival the dispatcher reaches is sent, dropped (counted) or, at the stop, counted
as `unsent_at_stop` (queued, or handed to a user that was stopped before writing it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import gevent
from gevent.event import AsyncResult

from loadgen.client.precise_timer import PreciseTimer
from loadgen.traffic.arrivals import ArrivalSchedule, Handoff, schedule_arrivals

__all__ = ["Arrival", "ArrivalDispatcher"]


@dataclass(frozen=True, slots=True)
class Arrival:
    """One scheduled request: its index in the open-loop request stream and its send time (monotonic seconds)."""

    index: int
    at: float


# What became of an arrival that was not sent: "dropped" (overflow: drop) or "unsent_at_stop".
UnsentHook = Callable[[str, Arrival, str], None]


def _ignore(_: float) -> None:
    pass


class ArrivalDispatcher:
    """This worker's share of the schedule, handed to the users of each variant at its times."""

    __slots__ = ("_arrivals", "_start", "_handoffs", "_on_unsent", "_on_slip", "_greenlet", "_waiting", "stopped")

    def __init__(
        self,
        schedule: ArrivalSchedule,
        seed: int,
        worker: int,
        workers: int,
        start: float,
        variants: Iterable[str],
        overflow: str,
        on_unsent: UnsentHook,
        on_slip: Callable[[float], None] | None = None,
    ) -> None:
        """`on_slip(seconds)`: called with how late each arrival was dispatched (the generator's own lateness,
        before any wait for a free sender)."""
        self._arrivals = schedule_arrivals(schedule, seed, worker, workers)
        self._start = start
        self._handoffs: dict[str, Handoff[AsyncResult, Arrival]] = {v: Handoff(overflow) for v in variants}
        self._on_unsent = on_unsent
        self._on_slip = on_slip or _ignore
        self._greenlet: gevent.Greenlet | None = None
        # The arrival the dispatcher is waiting to send (its time not yet reached, or reached while it was late).
        self._waiting: Arrival | None = None
        self.stopped = False

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        start = self._start
        # gevent's own timer wakes up to a millisecond late (the poll's rounding): a timerfd wakes on time.
        timer = PreciseTimer()
        slip = self._on_slip
        try:
            for index, t in self._arrivals:
                arrival = self._waiting = Arrival(index, start + t)
                timer.sleep_until(arrival.at)
                if self.stopped:
                    return
                self._waiting = None
                slip(time.monotonic() - arrival.at)
                self.dispatch(arrival)
        finally:
            timer.close()

    def dispatch(self, arrival: Arrival) -> None:
        """`arrival` is due: to a free user of every variant, else queued (late) or dropped (counted)."""
        for variant, handoff in self._handoffs.items():
            outcome, sender = handoff.arrive(arrival)
            if sender is not None:
                sender.set(arrival)
            elif outcome == "dropped":
                self._on_unsent(variant, arrival, "dropped")

    def next_arrival(self, variant: str) -> Arrival:
        """Block the calling user until an arrival of `variant` is due for it (at once when one is queued)."""
        handoff = self._handoffs[variant]
        slot = AsyncResult()
        queued = handoff.take(slot)
        if queued is not None:
            return queued
        try:
            arrival: Arrival = slot.get()
        except gevent.GreenletExit:
            # Stopped while waiting: an arrival handed to it just now was never sent.
            handoff.leave(slot)
            if slot.ready() and slot.successful():
                self._on_unsent(variant, slot.value, "unsent_at_stop")
            raise
        return arrival

    def stop(self) -> None:
        """No more arrivals; what was queued, or due but not yet reached, and never sent is counted
        `unsent_at_stop`. Idempotent."""
        if self.stopped:
            return
        self.stopped = True
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
        # Arrivals already due that a late dispatcher had not reached yet were never sent either: count them.
        now = time.monotonic()
        overdue: list[Arrival] = []
        if self._waiting is not None and self._waiting.at <= now:
            overdue.append(self._waiting)
            for index, t in self._arrivals:
                if self._start + t > now:
                    break
                overdue.append(Arrival(index, self._start + t))
        self._waiting = None
        for variant, handoff in self._handoffs.items():
            for arrival in [*handoff.close(), *overdue]:  # every variant is sent every arrival
                self._on_unsent(variant, arrival, "unsent_at_stop")
