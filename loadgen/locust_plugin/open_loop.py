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
as `unsent_at_stop` (queued, or handed to a user that was stopped before writing it). The stop has two steps: the
window ends (`end_schedule`: no arrival after it; those already due still go out, sent by the senders as they come
free during the drain, `load.drain`), then the drain ends (`stop`: what is still queued was never sent).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
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

    __slots__ = (
        "_arrivals",
        "_start",
        "_handoffs",
        "_on_unsent",
        "_on_slip",
        "_greenlet",
        "_waiting",
        "ended",
        "stopped",
    )

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
        self.ended = False  # the schedule ended (the window is over; the drain may still send what is queued)
        self.stopped = False

    @property
    def queued(self) -> int:
        """Arrivals due and waiting for a sender, over every variant."""
        return sum(h.queued for h in self._handoffs.values())

    @property
    def started(self) -> bool:
        return self._greenlet is not None

    def start(self, origin: float | None = None) -> None:
        """Send from now on; `origin` (monotonic) is where the schedule's offsets count from (default: the start
        given at construction). Once: a later call does nothing."""
        if self._greenlet is not None or self.ended:
            return
        if origin is not None:
            self._start = origin
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
                if self.ended:
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
            elif outcome != "queued":  # dropped, or the late backlog is full: never sent
                self._on_unsent(variant, arrival, outcome)

    def next_arrival(self, variant: str) -> Arrival | None:
        """Block the calling user until an arrival of `variant` is due for it (at once when one is queued); None
        once the schedule has ended and nothing is queued (the user has nothing more to send)."""
        handoff = self._handoffs[variant]
        queued = handoff.take_queued()
        if queued is not None or self.ended:
            return queued
        slot = AsyncResult()
        queued = handoff.take(slot)
        if queued is not None:
            return queued
        try:
            arrival: Arrival | None = slot.get()
        except gevent.GreenletExit:
            # Stopped while waiting: an arrival handed to it just now was never sent.
            handoff.leave(slot)
            if slot.ready() and slot.successful() and slot.value is not None:
                self._on_unsent(variant, slot.value, "unsent_at_stop")
            raise
        return arrival

    def end_schedule(self, senders: Mapping[str, int] | None = None) -> None:
        """The window ends: no arrival after this moment. Those already due that a late dispatcher had not reached
        are dispatched now, and the senders that come free in the drain send what is queued — at most one round of
        it: with `senders` (per variant, this worker's), a backlog longer than the variant's senders means the
        target was not keeping up, and what is beyond one arrival per sender is counted unsent at once (the drain
        finishes the run's work; it does not become a second run). Every idle sender is told there is nothing more
        (`next_arrival` returns None), so that its user can stop. Idempotent."""
        if self.ended:
            return
        self.ended = True
        if self._greenlet is not None:
            self._greenlet.kill(block=False)
        now = time.monotonic()
        overdue: list[Arrival] = []
        if self._waiting is not None and self._waiting.at <= now:
            overdue.append(self._waiting)
            for index, t in self._arrivals:
                if self._start + t > now:
                    break
                overdue.append(Arrival(index, self._start + t))
        self._waiting = None
        for arrival in overdue:
            self.dispatch(arrival)
        for variant, handoff in self._handoffs.items():
            if senders is not None:
                for arrival in handoff.trim(senders.get(variant, 0)):
                    self._on_unsent(variant, arrival, "unsent_at_stop")
            for sender in handoff.release_idle():
                sender.set(None)

    def stop(self) -> None:
        """The drain is over: what is still queued was never sent, counted `unsent_at_stop`. Idempotent."""
        self.end_schedule()
        if self.stopped:
            return
        self.stopped = True
        for variant, handoff in self._handoffs.items():
            for arrival in handoff.close():  # every variant is sent every arrival
                self._on_unsent(variant, arrival, "unsent_at_stop")
