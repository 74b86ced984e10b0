"""What a streaming connection (connection.py) reads a response body into: the `BodyConsumer` protocol, kept apart
from the connection so that its module stays one reader's worth."""

from __future__ import annotations

from typing import Any, Protocol

__all__ = ["BodyConsumer"]


class BodyConsumer(Protocol):
    """What the connection streams a 200 body into (a `StreamAccumulator`)."""

    finished: bool

    def on_connection(self, connect_s: float | None, tls_s: float | None) -> None: ...

    def on_sent(self, t: float) -> None: ...

    def on_head(self, content_type: str) -> None: ...

    def feed(self, t: float, data: bytes) -> None: ...

    def on_event(self, t: float, payload: bytes) -> None: ...

    sse_idle: bool

    @property
    def fatal(self) -> bool: ...

    # The C fast half's hand-over (protocol/accumulator.py): a chunk counter or None, and the state moving between
    # it and Python.
    def make_chunk_counter(self) -> Any: ...

    def disarm_fast_path(self) -> None: ...

    def arm_fast_path(self) -> None: ...
    def count_first(self, t: float, data: bytes) -> int: ...
