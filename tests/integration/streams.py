"""Streaming chat requests straight through loadgen's client (no Locust): N greenlets, each on one keep-alive
connection through a given reactor — for tests that compare the C and the Python read paths with a truth log."""

from __future__ import annotations

from typing import Any

import gevent
import orjson

from loadgen.client.connection import Endpoint, StreamConnection
from loadgen.client.reactor import Reactor
from loadgen.measure.records import RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect


def stream_chat(
    base_url: str, tag: str, reactor: Reactor, *, users: int, per_user: int, body: dict[str, Any]
) -> list[RequestRecord]:
    """`users` greenlets, each streaming `per_user` openai-chat requests of `body` (ids `{tag}-{user}-{j}`); each
    record ends at its last read's kernel stamp, like every chunk time."""
    dialect = get_dialect("openai-chat")
    payload = orjson.dumps(body)
    records: list[RequestRecord] = []

    def user(u: int) -> None:
        conn = StreamConnection(Endpoint(base_url), 5.0, 10.0, reactor=reactor)
        head = conn.head_bytes(dialect.path_for("m"), {"Content-Type": "application/json"})
        try:
            for j in range(per_user):
                rid = f"{tag}-{u}-{j}"
                acc = StreamAccumulator(RequestRecord(rid, "v", "m"), dialect)
                status = conn.post_stream(head, b"X-Request-Id: %s\r\n" % rid.encode(), payload, acc)[1]
                assert status == 200
                records.append(acc.finish(conn.last_rx))
        finally:
            conn.close()

    gevent.joinall([gevent.spawn(user, u) for u in range(users)], raise_error=True, timeout=60)
    return records
