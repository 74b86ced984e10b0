"""The streaming LLM Locust user: one variant, one seeded request stream, one keep-alive connection."""

from __future__ import annotations

import gevent
from locust import User, task
from locust.env import Environment

from ..records import ErrorClass, RequestRecord
from .lanes import Lane
from .runtime import runtime_of

__all__ = ["LLMUser"]


class LLMUser(User):
    """Abstract: subclass it in a locustfile (`class StreamingUser(LLMUser): pass`).

    Every finished request goes to loadgen's aggregate (exact TTFT/ITL/TPOT histograms) and is also fired as
    Locust `request` events — `STREAM` with the E2E time and `TTFT` with time to first token — so Locust's own
    UI, CSV and HTML reports keep working.
    """

    abstract = True

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        rt = runtime_of(environment)
        if rt.assigner is None:
            rt.on_test_start()
        assert rt.assigner is not None
        variant, stream_id = rt.assigner.next()
        self._rt = rt
        self._lane = Lane(rt.scenario, variant, stream_id, rt.worker_tag)
        self._backoff = 0.0

    def wait_time(self) -> float:
        return self._rt.scenario.load.think_time

    def on_stop(self) -> None:
        self._lane.close()

    @task
    def stream(self) -> None:
        rec = self._lane.run_one(self._rt.warmup_end)
        # Histograms, raw shard and Locust's stats are filled in by the runtime's recorder when the loop has time,
        # so that a wave of requests finishing together does not hold up the timestamps of the streams still running.
        self._rt.submit(rec, self._fire)
        if rec.error == ErrorClass.CONNECT:
            # A target that refuses connections fails in microseconds: without a pause every user would spin,
            # burning the worker's CPU and flooding the counts. Back off 50 ms doubling to 2 s; reset on success.
            self._backoff = min(2.0, self._backoff * 2 or 0.05)
            gevent.sleep(self._backoff)
        else:
            self._backoff = 0.0

    def _fire(self, rec: RequestRecord) -> None:
        fire = self.environment.events.request.fire
        name = f"{rec.variant}/{rec.mix}"
        e2e = rec.e2e
        exc = None if rec.error is None else Exception(f"{rec.error}: {rec.error_detail[:200]}")
        fire(
            request_type="STREAM",
            name=name,
            response_time=(e2e or 0.0) * 1e3,
            response_length=rec.output_token_count,
            exception=exc,
            context={},
        )
        ttft = rec.ttft
        if ttft is not None:
            fire(
                request_type="TTFT", name=name, response_time=ttft * 1e3, response_length=0, exception=None, context={}
            )
