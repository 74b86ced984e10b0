"""The streaming LLM Locust user: one variant, one seeded request stream, one keep-alive connection.

Each variant gets a user class of its own (`variant_user_classes`), weighted by the variant's `weight`: Locust's
dispatcher then spreads users over all workers together, so users per variant follow the weights whatever the
worker count (3 variants × 10 users on 4 workers: 4 / 3 / 3, not 4 / 4 / 2 per-worker rounding).

Multi-turn sessions (a mix with `sessions`): a request that opens a session is followed, after the session's think
time, by its later turns, each one task of the same user (so to the same variant) carrying the history with the
reply it got; then the user draws its next request. Closed loop: the user waits `load.think_time` between sessions.
Open loop: a session's first turn is a scheduled arrival, its later turns are sent by the same user, unscheduled
(no queue delay), each after the think time; meanwhile that user takes no arrival, so `load.users` bounds the
sessions in flight. A failed turn ends its session; a turn cut by the stop is recorded as any request cut by it.

Agent tasks (a mix with `agent`; `traffic.agent_trace`'s recorded sessions): a request that opens one runs the whole
task in this user's task call — its steps, its tools' time and its sub-agents (locust_plugin/agent_runner.py) — then
the user draws its next request as after a session.
"""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn

import gevent
from gevent.event import Event
from locust import User, task
from locust.env import Environment

from loadgen.config.scenario import Scenario
from loadgen.locust_plugin.agent_runner import run_task
from loadgen.locust_plugin.request_stream import CutByStop
from loadgen.locust_plugin.runtime import runtime_of
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.traffic.sampler import RequestSpec
from loadgen.traffic.sessions import Conversation

__all__ = ["LLMUser", "variant_user_classes"]


class LLMUser(User):
    """Abstract: subclass it in a locustfile (`class StreamingUser(LLMUser): pass`); loadgen derives one class
    per variant from it.

    Every finished request goes to loadgen's aggregate (exact TTFT/ITL/TPOT histograms) and is also fired as a
    Locust `STREAM` request event with its E2E time (failures included), so Locust's own UI, CSV and HTML reports
    count each request once. TTFT goes to a `TTFT` row of Locust's statistics that is kept out of the Aggregated
    total, which would otherwise count every request twice.
    """

    abstract = True
    variant: ClassVar[str | None] = None
    # Open loop's one class of senders (its users' variants are chosen per worker); not a base to derive from.
    senders: ClassVar[bool] = False

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        rt = runtime_of(environment)
        if rt.assigner is None:
            rt.on_test_start()
        assert rt.assigner is not None
        self._rt = rt
        if self.variant is not None:
            self._variant = self.variant
        elif rt.scenario.load.arrival is not None:
            self._variant = rt.assigner.next_variant()
        else:
            self._variant = rt.scenario.variants[0].name
        self._requests = rt.assigner.new_stream(self._variant)
        # Whether the stream keeps every reply's text anyway (a tokenizer counts the chunks): sessions add theirs.
        self._keep_text = self._requests.keep_text
        self._backoff = 0.0
        # The session in progress and its next turn, drawn when the last turn's reply came (None: no session).
        self._session: Conversation | None = None
        self._next_turn: RequestSpec | None = None

    def wait_time(self) -> float:
        if self._next_turn is not None and self._session is not None:
            return self._session.think_time
        return self._rt.scenario.load.think_time

    def on_stop(self) -> None:
        self._requests.close()

    @task
    def stream(self) -> None:
        rt = self._rt
        dispatcher = rt.dispatcher
        arrival = None
        spec = self._next_turn
        self._next_turn = None
        if rt.stopping and (dispatcher is None or spec is not None):
            # The window is over: the drain waits for the requests in flight, this user starts none (a closed-loop
            # request, a session's next turn); Locust kills it when the drain ends.
            _idle_until_killed()
        try:
            if spec is None:
                if dispatcher is None:
                    spec = self._requests.draw()
                    scheduled = None
                else:
                    # Open loop: wait for this worker's next arrival of the variant (due now, or late), and send it.
                    arrival = dispatcher.next_arrival(self._variant)
                    if arrival is None:  # the schedule ended and nothing is queued: nothing more to send
                        _idle_until_killed()
                    spec = self._requests.draw(arrival.index)
                    scheduled = arrival.at
                task = self._requests.sampler.agent_task(spec) if spec.turns else None
                if task is not None:  # a synthetic agent's task, or a recorded one (`traffic.agent_trace`)
                    run_task(rt, self._requests, task, self._fire, arrival)  # records its steps and itself
                    self._requests.keep_text = self._keep_text
                    return
                self._session = Conversation(self._requests.sampler, spec) if spec.turns else None
            else:
                scheduled = None
            session = self._session
            # Keep a turn's reply text when a later turn sends it back; other requests keep the C read path.
            self._requests.keep_text = self._keep_text or (session is not None and not session.over)
            rt.in_flight += 1  # what the drain at the stop waits for
            try:
                rec = self._requests.send_next(rt.warmup_end, scheduled=scheduled, spec=spec)
            finally:
                rt.in_flight -= 1
        except CutByStop as cut:
            if arrival is not None and not cut.written:
                # Stopped before the request went out: an arrival never sent, not a request cut short.
                self._rt.count_unsent(self._variant, arrival, "unsent_at_stop")
            else:
                self._rt.submit(cut.record, _nothing)
            raise
        # Histograms, raw shard and Locust's stats are filled in by the runtime's recorder when the loop has time,
        # so that a wave of requests finishing together does not hold up the timestamps of the streams still running.
        self._rt.submit(rec, self._fire)
        if session is not None:
            # A failed turn ends its session (its turn's requests minus ok in the report); else on to the next turn.
            # A turn the client gave up (`traffic.cancel`) ends it too: the user left.
            ok = rec.ok and not rec.cancelled
            call = rec.tool_call_reply  # an agentic session: the next turn sends the tool's result
            self._next_turn = session.reply(rec.output_text, rec.output_token_count, call) if ok else None
            if self._next_turn is None:
                self._session = None
        if rec.error == ErrorKind.CONNECT and dispatcher is None:
            # A target that refuses connections fails in microseconds: without a pause every user would spin,
            # burning the worker's CPU and flooding the counts. Back off 50 ms doubling to 2 s; reset on success.
            self._backoff = min(2.0, self._backoff * 2 or 0.05)
            gevent.sleep(self._backoff)
        else:
            self._backoff = 0.0

    def _fire(self, rec: RequestRecord) -> None:
        name = f"{rec.variant}/{rec.mix}"
        e2e = rec.e2e
        exc = None if rec.error is None else Exception(f"{rec.error}: {rec.error_detail[:200]}")
        self.environment.events.request.fire(
            request_type="STREAM",
            name=name,
            response_time=(e2e or 0.0) * 1e3,
            response_length=rec.output_token_count,
            exception=exc,
            context={},
        )
        ttft = rec.ttft
        if ttft is not None:
            # Straight into its own entry: `RequestStats.log_request` would add it to the Aggregated total too.
            self.environment.stats.get(name, "TTFT").log(ttft * 1e3, 0)


def _nothing(_: RequestRecord) -> None:
    """A request cut by the stop is recorded, but it is no Locust request: not a sample, not a failure."""


def variant_user_classes(base: type[LLMUser], scenario: Scenario) -> list[type[LLMUser]]:
    """One concrete subclass of `base` per variant, weighted by the variant's weight; in open loop one class of
    senders, whose users each worker splits over the variants (`StreamAssigner.next_variant`)."""
    if scenario.load.arrival is not None:
        senders: dict[str, Any] = {
            "senders": True,
            "abstract": False,
            "__module__": base.__module__,
            "__doc__": "Sends the open-loop schedule to one variant each (the worker splits them by weight).",
        }
        return [type(f"{base.__name__}-senders", (base,), senders)]
    classes: list[type[LLMUser]] = []
    for v in scenario.variants:
        attrs: dict[str, Any] = {
            "variant": v.name,
            "weight": v.weight,
            "abstract": False,
            "__module__": base.__module__,
            "__doc__": f"Streams to variant {v.name!r} ({v.base_url}).",
        }
        classes.append(type(f"{base.__name__}-{v.name}", (base,), attrs))
    return classes


def _idle_until_killed() -> NoReturn:
    """Wait for Locust to kill this user (at the end of the drain): it has nothing more to send."""
    Event().wait()
    raise AssertionError("unreachable: nothing sets this event")
