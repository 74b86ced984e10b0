"""Baseline: a minimal Locust FastHttpUser that reads the SSE body line by line itself (not `iter_lines()`)."""

from __future__ import annotations

import itertools
import os
import time

from locust import FastHttpUser, events, task

from bench.clients._common import BODY, PATH, Recorder

_rec = Recorder()
_ids = itertools.count()


@events.quitting.add_listener
def _write(**_: object) -> None:
    _rec.write()


class StreamingFastHttpUser(FastHttpUser):
    network_timeout = 60.0
    connection_timeout = 10.0

    @task
    def stream(self) -> None:
        rid = f"fh{os.getpid()}-{next(_ids)}"
        headers = {"Content-Type": "application/json", "X-Request-Id": rid}
        sent = time.monotonic()
        with self.client.post(PATH, data=BODY, headers=headers, stream=True, catch_response=True) as resp:
            raw = resp._response  # the geventhttpclient response: bytes as they arrive

            def lines():  # type: ignore[no-untyped-def]
                while True:
                    line = raw.readline(b"\n")
                    if not line:
                        return
                    yield time.monotonic(), line

            _rec.stream(rid, sent, lines())
            resp.success()
