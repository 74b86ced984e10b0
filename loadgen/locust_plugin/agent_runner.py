"""Runs one agent task (traffic/agent.py) for a Locust user: its steps, its tools' time, its sub-agents.

The task's top-level agent sends its steps on the user's own request stream, one after another; after each reply it
waits for its tools (and its harness's pause), and starts the sub-agents the step spawned at once, each on a
stream of its own (`RequestStream.fork`: a connection of its own), running beside the tools. It sends its next step
when the tools are done and every sub-agent has ended, with their final replies in its context. Every step is a
request of the verdict like any other (recorded as it ends); the task is a session of it (`SessionTally`, recorded
after its steps, however it ended: measure/sessions.py). A replayed trace's task (traffic/trace_agent.py) says more
in its pauses: a sub-agent may be joined at a later step than the next (or at the task's end, which then waits for
it), and its recorded gap is waited after the sub-agents joined before the next step ended, not beside them. Replayed
on its recorded clock (`timing: offsets`), a step has a due time instead (`AgentTask.due_s`: from when the task's
first step was sent): the agent sends it then, or at once when what it waits on (its previous step, the sub-agents
joined before it; a sub-agent's first step: the parent's step that spawned it) ended later. A step whose
prerequisites ended by its due time adds its schedule slip, sent − due, to the session (`SessionTally.slips`); one
whose prerequisites ended later was waiting on the server, and has none.

A failed step ends its agent (a sub-agent's failure ends the task at the join: the task failed). The stop ends a task
wherever it is: a step in flight is cut (and recorded as cut), a wait for tools or sub-agents is left, sub-agents
still running are killed, and the session is recorded as cut.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import gevent

from loadgen.locust_plugin.request_stream import CutByStop
from loadgen.measure.sessions import SessionTally

if TYPE_CHECKING:
    from collections.abc import Callable

    from loadgen.locust_plugin.open_loop import Arrival
    from loadgen.locust_plugin.request_stream import RequestStream
    from loadgen.locust_plugin.runtime import Runtime
    from loadgen.measure.records import RequestRecord
    from loadgen.traffic.agent import AgentTask

__all__ = ["run_task"]


# An agent's final reply: (text, tokens, when its last step ended on the monotonic clock).
_Reply = tuple[str, int, float]


class _Stopped(Exception):
    """The window ended between two steps: the task goes no further."""


def run_task(
    rt: Runtime,
    stream: RequestStream,
    session: AgentTask,
    fire: Callable[[RequestRecord], None],
    arrival: Arrival | None = None,
) -> None:
    """Run the task `session` opens (open loop: the scheduled `arrival` its first step is) to its end, and record
    it; a task whose first step never went out is an arrival not sent (counted so), no session."""
    first = session.first
    tally = SessionTally(f"{stream.stream_id}-{first.index}", stream.variant, first.mix)
    rt.task_started(stream.variant, first.mix)  # the drain waits for it; the live view counts it under way
    try:
        _record(rt, stream, session, fire, tally, arrival)
    finally:
        rt.task_ended(stream.variant, first.mix)


def _record(
    rt: Runtime,
    stream: RequestStream,
    session: AgentTask,
    fire: Callable[[RequestRecord], None],
    tally: SessionTally,
    arrival: Arrival | None,
) -> None:
    """Run the task and record it as it ended."""
    try:
        _run(rt, stream, session, fire, tally, arrival)
    except _Stopped:
        tally.stopped = True
    except gevent.GreenletExit as stop:
        tally.stopped = True
        if tally.records:
            rt.submit_session(tally)
        if isinstance(stop, CutByStop):  # recorded here: the user's own handler of a cut request must not again
            raise gevent.GreenletExit from None
        raise
    if tally.records:
        rt.submit_session(tally)


def _run(
    rt: Runtime,
    stream: RequestStream,
    session: AgentTask,
    fire: Callable[[RequestRecord], None],
    tally: SessionTally,
    arrival: Arrival | None = None,
    spawned: float | None = None,
) -> _Reply | None:
    """One agent (the top-level one, or a sub-agent on its own stream, `spawned` when the parent's step that spawned
    it ended): its steps to its last; its final reply (text, tokens, when it ended), or None when a step failed (the
    task failed)."""
    pending: list[tuple[int, gevent.Greenlet]] = []  # sub-agents running: (the step joining them, greenlet)
    try:
        return _steps(rt, stream, session, fire, tally, arrival, pending, spawned)
    finally:
        gevent.killall([g for _, g in pending if not g.dead])


def _on_clock(session: AgentTask, tally: SessionTally, ready: float | None) -> tuple[float | None, float]:
    """Wait until the next step is due on the task's recorded clock (none: not replayed on one, or the task's first
    step); (its due time when its prerequisites, done at `ready`, left it to the client, else None; seconds
    waited)."""
    offset = session.due_s
    origin = tally.started
    if offset is None or origin is None or ready is None:
        return None, 0.0
    due = origin + offset
    began = now = time.monotonic()
    while now < due:  # the loop's timers run on its cached clock: a sleep may end a little early
        gevent.sleep(due - now)
        now = time.monotonic()
    return (due if ready <= due else None), now - began


def _steps(
    rt: Runtime,
    stream: RequestStream,
    session: AgentTask,
    fire: Callable[[RequestRecord], None],
    tally: SessionTally,
    arrival: Arrival | None,
    pending: list[tuple[int, gevent.Greenlet]],
    spawned: float | None,
) -> _Reply | None:
    top = not session.first.branch
    spec = session.first
    scheduled = None if arrival is None else arrival.at
    ready = spawned  # when what the next step waits on was done (the top-level agent's first step: nothing)
    previous: str | None = None  # the agent's previous step's request id
    while True:
        due_at, waited = _on_clock(session, tally, ready)
        if top:
            tally.tool_s += waited
        if previous is not None and waited:  # the idle time after that step, as a gap's is
            tally.tool_waits[previous] = tally.tool_waits.get(previous, 0.0) + waited
        if rt.stopping and rt.stopped_early_now:
            # A stop_when rule ended the run: its answer is known, no step is sent. Otherwise a task the window
            # opened goes on through the drain (its steps measured whole) until it ends or the drain does.
            raise _Stopped
        stream.keep_text = True  # every reply goes back into the context
        rt.in_flight += 1  # what the drain at the stop waits for
        try:
            rec = stream.send_next(rt.warmup_end, scheduled=scheduled, spec=spec)
        except CutByStop as cut:
            if arrival is not None and scheduled is not None and not cut.written:
                # Stopped before the task's opening request went out: an arrival never sent, not a request cut.
                rt.count_unsent(stream.variant, arrival, "unsent_at_stop")
            else:
                tally.records.append(cut.record)
                rt.submit(cut.record, _nothing)
            raise
        finally:
            rt.in_flight -= 1
        scheduled = None
        if due_at is not None:
            tally.slips.append(rec.sent - due_at)
        previous = rec.request_id
        tally.records.append(rec)
        rt.submit(rec, fire)
        if not rec.ok or rec.cancelled:
            return None
        ended = rec.done if rec.done is not None else time.monotonic()
        pause = session.after(rec.output_text, rec.output_token_count, rec.tool_call_reply)
        tally.subagents += len(pause.children)
        joins = pause.joins or [spec.turn + 1] * len(pause.children)
        for child, join in zip(pause.children, joins, strict=True):
            pending.append((join, gevent.spawn(_child, rt, stream.fork(), child, fire, tally, ended)))
        over = session.over
        # The sub-agents the next step waits for (all that are left, at the task's end).
        due = [g for join, g in pending if over or join <= spec.turn + 1]
        pending[:] = [(join, g) for join, g in pending if g not in due]
        began = time.monotonic()
        if pause.join_first:
            gevent.joinall(due)
            joined_at = time.monotonic()
            gevent.sleep(pause.wait_s)
            waited = time.monotonic() - joined_at
        else:
            gevent.sleep(pause.wait_s)
            waited = time.monotonic() - began
            gevent.joinall(due)
        tally.tool_waits[rec.request_id] = waited  # the timeline's gap after this step (measure/sessions.py)
        if top:
            tally.tool_s += waited
            tally.subagent_s += max(time.monotonic() - began - waited, 0.0)
        joined: list[_Reply | None] = [g.value for g in due]
        if any(j is None for j in joined):
            return None  # a sub-agent failed: so did the task
        replies = [j for j in joined if j is not None]
        ready = max([ended, *(j[2] for j in replies)])
        if over:
            if top:
                tally.ended = time.monotonic() if due else rec.done
            tally.compactions += session.compactions if top else 0
            return rec.output_text, rec.output_token_count, ready
        step = session.next_step([(text, tokens) for text, tokens, _ in replies])
        assert step is not None  # not over, so there is a next step
        spec = step


def _child(
    rt: Runtime,
    stream: RequestStream,
    session: AgentTask,
    fire: Callable[[RequestRecord], None],
    tally: SessionTally,
    spawned: float,
) -> _Reply | None:
    """A sub-agent's greenlet: its task on its own connection, closed when it ends."""
    try:
        result = _run(rt, stream, session, fire, tally, spawned=spawned)
        tally.compactions += session.compactions
        return result
    except _Stopped:
        tally.stopped = True
        return None
    finally:
        stream.close()


def _nothing(_: RequestRecord) -> None:
    """A step cut by the stop is recorded, but it is no Locust request: not a sample, not a failure."""
