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

import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import gevent
from gevent import get_hub, getcurrent
from gevent.hub import Waiter

from loadgen.client.precise_timer import PreciseTimer
from loadgen.client.reactor import Reactor
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
        "_hub",
        "_timer",
        "_reactor",
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
        reactor: Reactor | None = None,
    ) -> None:
        """`on_slip(seconds)`: called with how late each arrival was dispatched (the generator's own lateness,
        before any wait for a free sender). `reactor`: the worker's response reader, which then also sends what
        falls due while it handles a wave of reads (`Reactor.call_between_reads`)."""
        self._arrivals = schedule_arrivals(schedule, seed, worker, workers)
        self._start = start
        self._handoffs: dict[str, Handoff[Waiter[Arrival | None], Arrival]] = {v: Handoff(overflow) for v in variants}
        self._on_unsent = on_unsent
        self._on_slip = on_slip or _ignore
        self._hub: Any = None
        self._timer: PreciseTimer | None = None
        self._reactor = reactor
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
        return self._timer is not None

    def start(self, origin: float | None = None) -> None:
        """Send from now on; `origin` (monotonic) is where the schedule's offsets count from (default: the start
        given at construction). Once: a later call does nothing."""
        if self._timer is not None or self.ended:
            return
        if origin is not None:
            self._start = origin
        self._hub = get_hub()
        self._timer = PreciseTimer()
        self._next()
        self._arm()

    def _next(self) -> None:
        """Take the next arrival of the schedule (none left: the schedule is spent)."""
        for index, t in self._arrivals:
            self._waiting = Arrival(index, self._start + t)
            return
        self._waiting = None

    def _arm(self) -> None:
        """Have the timer and the reactor call `_due` when the waiting arrival falls due."""
        waiting = self._waiting
        if waiting is None or self.ended or self._timer is None:
            return
        self._timer.call_at(waiting.at, self._due)
        if self._reactor is not None:
            self._reactor.call_between_reads(waiting.at, self._due)

    def _due(self) -> None:
        """In the loop (the timer's watcher, top priority, or the reactor between two reads of a wave): every
        arrival due by now is dispatched, each sender switched to at once to write its request — not woken by a
        callback that runs only after every socket that became readable in the same loop iteration was handled.
        The timer is armed once, for the first arrival not yet due (a backlog of due ones costs no re-arming)."""
        try:
            while not self.ended and (arrival := self._waiting) is not None and arrival.at <= time.monotonic():
                self._waiting = None
                self._on_slip(time.monotonic() - arrival.at)
                self.dispatch(arrival)
                if not self.ended:
                    self._next()
        except Exception:
            # A hook that fails must not end the schedule silently: say so and go on with the next arrival.
            self._hub.handle_error(self, *sys.exc_info())
            if not self.ended and self._waiting is None:
                self._next()
        self._arm()

    def dispatch(self, arrival: Arrival) -> None:
        """`arrival` is due: to a free user of every variant, else queued (late) or dropped (counted)."""
        for variant, handoff in self._handoffs.items():
            outcome, sender = handoff.arrive(arrival)
            if sender is not None:
                self._hand(variant, sender, arrival)
            elif outcome != "queued":  # dropped, or the late backlog is full: never sent
                self._on_unsent(variant, arrival, outcome)

    def _hand(self, variant: str, sender: Waiter[Arrival | None], arrival: Arrival | None) -> None:
        """Switch to the waiting `sender` with `arrival` (None: nothing more to send). Only the loop may switch to
        a waiting greenlet: from elsewhere this runs as the loop's next callback."""
        hub = self._hub or get_hub()
        if getcurrent() is not hub:
            hub.loop.run_callback(self._hand, variant, sender, arrival)
        elif sender.greenlet is None:  # its user was stopped (killed) before it could take the arrival
            if arrival is not None:
                self._on_unsent(variant, arrival, "unsent_at_stop")
        else:
            sender.switch(arrival)

    def next_arrival(self, variant: str) -> Arrival | None:
        """Block the calling user until an arrival of `variant` is due for it (at once when one is queued); None
        once the schedule has ended and nothing is queued (the user has nothing more to send)."""
        handoff = self._handoffs[variant]
        queued = handoff.take_queued()
        if queued is not None or self.ended:
            return queued
        slot: Waiter[Arrival | None] = Waiter()
        queued = handoff.take(slot)
        if queued is not None:
            return queued
        try:
            return slot.get()
        except gevent.GreenletExit:
            handoff.leave(slot)  # stopped while waiting; an arrival handed to it meanwhile is counted by _hand
            raise

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
        if self._timer is not None:
            self._timer.close()
        if self._reactor is not None:
            self._reactor.call_between_reads(0.0, None)
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
                self._hand(variant, sender, None)

    def stop(self) -> None:
        """The drain is over: what is still queued was never sent, counted `unsent_at_stop`. Idempotent."""
        self.end_schedule()
        if self.stopped:
            return
        self.stopped = True
        for variant, handoff in self._handoffs.items():
            for arrival in handoff.close():  # every variant is sent every arrival
                self._on_unsent(variant, arrival, "unsent_at_stop")
