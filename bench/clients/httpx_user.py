"""Baseline: a minimal httpx-under-gevent Locust user, one `httpx.Client` per user, `iter_lines()`."""

from __future__ import annotations

import itertools
import os
import sys
import time

# gevent's monkey-patching removes select.epoll, which trio needs at import; httpcore imports trio when it is
# installed and only tolerates ImportError. A sync client needs neither.
sys.modules.setdefault("trio", None)  # type: ignore[arg-type]

import httpx  # noqa: E402
from locust import User, events, task  # noqa: E402

from bench.clients._common import BODY, PATH, Recorder  # noqa: E402

_rec = Recorder()
_ids = itertools.count()


@events.quitting.add_listener
def _write(**_: object) -> None:
    _rec.write()


class StreamingHttpxUser(User):
    def __init__(self, environment) -> None:  # type: ignore[no-untyped-def]
        super().__init__(environment)
        self.client = httpx.Client(base_url=self.host, timeout=60.0)

    def on_stop(self) -> None:
        self.client.close()

    @task
    def stream(self) -> None:
        rid = f"hx{os.getpid()}-{next(_ids)}"
        headers = {"Content-Type": "application/json", "X-Request-Id": rid}
        sent = time.monotonic()
        with self.client.stream("POST", PATH, content=BODY, headers=headers) as resp:
            _rec.stream(rid, sent, ((time.monotonic(), line.encode()) for line in resp.iter_lines()))
