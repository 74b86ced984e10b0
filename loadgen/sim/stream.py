"""One request in flight on a simulated variant: the engine's token sink, writing its framing's events (or the final
body) to the client, and holding them back when a fault says so (``slow_headers_s``, a stall).

Streams start as soon as the request is accepted (the head, with vLLM's role-only chunk for OpenAI chat), then
everything an engine step produced for the request leaves in one write, the last step with the stream's end. What
it writes goes to its variant's books (``StreamHost``: sim/server.py's ``VariantServer``): metrics and the truth log.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Protocol

from loadgen.sim.engine import Engine, SimSequence
from loadgen.sim.faults import ERROR_EVENT, MALFORMED, RESET, SLOW_HEADERS, STALL, FaultPlan
from loadgen.sim.framings import Framing, SimRequest
from loadgen.sim.http import Response
from loadgen.sim.profiles import SimProfile
from loadgen.sim.truth import TruthLog

__all__ = ["RequestStream", "StreamHost"]

_log = logging.getLogger(__name__)


class StreamHost(Protocol):
    """What a stream needs of its variant's server: its engine, its profile, its truth log, and its books."""

    name: str
    profile: SimProfile
    engine: Engine
    truth: TruthLog | None

    def record_tokens(self, stream: RequestStream, t: float, n: int, t_end: float) -> None: ...

    def record_finish(self, stream: RequestStream, t: float) -> None: ...

    def record_fault(self, rid: str, fault: str, t: float) -> None: ...


# One pending piece of output while a stream is held: (bytes, tokens it carries, faults that take effect with it).
_Out = tuple[bytes, int, tuple[str, ...]]

# How a response ends: normally ("done"), or through a fault (CUT / ERROR_EVENT / RESET); None = more to come.
_DONE = "done"


class RequestStream:
    """One request in flight: the engine's token sink, writing its framing's events (or the final body) to the client.

    Output can be *held* (headers delayed by ``slow_headers_s``, or a stall): the engine keeps generating, the
    events queue up in order in ``pending`` together with how the stream ends, and all of it goes out in one write
    when the hold ends. Truth records are taken at that write, so they stay the times the client could see.
    """

    __slots__ = (
        "server", "response", "framing", "req", "rid", "created", "vocab_offset", "perturbed", "arrival", "first_token",
        "first_step", "seq", "plan", "hold", "pending", "pending_end", "malformed_sent", "reasoning_tokens",
    )  # fmt: skip

    def __init__(
        self,
        server: StreamHost,
        response: Response,
        framing: Framing,
        req: SimRequest,
        rid: str,
        arrival: float,
        vocab_offset: int,
        plan: FaultPlan | None = None,
        perturbed: frozenset[int] = frozenset(),
    ) -> None:
        self.server, self.response, self.framing, self.req = server, response, framing, req
        self.rid, self.arrival = rid, arrival
        self.created = int(time.time())
        self.vocab_offset = vocab_offset
        self.perturbed = perturbed
        self.first_token: float | None = None  # write time of the first token
        self.first_step: float | None = None  # engine time of the step that produced it
        self.seq: SimSequence | None = None
        self.plan = plan
        self.hold: asyncio.TimerHandle | None = None
        self.pending: list[_Out] = []
        self.pending_end: str | None = None
        self.malformed_sent = False
        self.reasoning_tokens = min(server.profile.reasoning_tokens, req.max_tokens) if framing.reasoning else 0

    @property
    def prompt_tokens(self) -> int:
        return len(self.req.words)

    @property
    def cached_tokens(self) -> int:
        return self.seq.cached_tokens if self.seq is not None else 0

    def _start(self, data: bytes) -> float:
        return self.response.start_stream(200, self.framing.content_type, [("x-request-id", self.rid)], data)

    # ---- output: start, hold, flush ----
    def begin(self) -> None:
        """Called once the request is queued: send the head now, or hold it for ``slow_headers_s``."""
        plan = self.plan
        if plan is not None and plan.slow_headers_s > 0:
            self.server.record_fault(self.rid, SLOW_HEADERS, time.monotonic())
            head = self.framing.head(self) if self.req.stream else b""
            if head:
                self.pending.append((head, 0, ()))
            self._hold_for(plan.slow_headers_s)
        elif self.req.stream and self.framing.head_on_accept:
            self._start(self.framing.head(self))

    def _hold_for(self, seconds: float) -> None:
        self.hold = asyncio.get_running_loop().call_later(seconds, self._release)

    def _release(self) -> None:
        self.hold = None
        items, end = self.pending, self.pending_end
        self.pending, self.pending_end = [], None
        try:
            self._flush(items, end)
        except Exception:
            # A timer callback has no caller to report to: log, and drop the connection rather than leave the
            # client waiting on a response that will never come.
            _log.exception("fault-injected output of request %s failed", self.rid)
            self.response.reset()

    def _emit(self, items: list[_Out], end: str | None) -> None:
        if self.hold is not None:
            self.pending.extend(items)
            self.pending_end = end
        else:
            self._flush(items, end)

    def _flush(self, items: list[_Out], end: str | None) -> None:
        r, server = self.response, self.server
        if not r.connected:
            return
        if not self.req.stream:
            if end == RESET:
                server.record_fault(self.rid, RESET, time.monotonic())
                r.reset()
            elif end == _DONE:
                body, n, _ = items[-1]
                t = r.send(200, body, headers=[("x-request-id", self.rid)])
                server.record_tokens(self, t, n, r.written_at)
                server.record_finish(self, t)
            return
        data = b"".join(chunk for chunk, _, _ in items)
        closes = end is not None and end != RESET  # done, cut and error_event all end the chunked body cleanly
        if not r.started:
            t = self._start(data)
            t_end = r.written_at
            if closes:
                r.write(b"", end=True)
        else:
            t = r.write(data, end=closes)
            t_end = r.written_at
        had_token = self.first_token is not None
        for _, n, faults in items:
            for fault in faults:
                server.record_fault(self.rid, fault, t)
            if n:
                server.record_tokens(self, t, n, t_end)
        if end == _DONE:
            server.record_finish(self, t)
        elif end is not None:
            server.record_fault(self.rid, end, t)
            if end == RESET:
                r.reset()  # connection_lost then runs abort(), which records the abort
            elif server.truth is not None:  # the request did not complete: same record as a client hang-up
                server.truth.abort(self.rid, server.name, t)
        elif not had_token and self.first_token is not None and self.plan is not None and self.plan.stall_s > 0:
            # The first token chunk just went out and more will follow: go silent now.
            server.record_fault(self.rid, STALL, t)
            self._hold_for(self.plan.stall_s)

    # ---- engine sink ----
    def on_tokens(self, seq: SimSequence, n_tokens: int, finished: bool) -> None:
        if not self.response.connected:
            return  # connection_lost is about to abort this sequence
        if self.first_step is None:
            self.first_step = time.monotonic()
        plan = self.plan
        end = plan.end if plan is not None and plan.end is not None and seq.generated >= plan.end_at else None
        if end is not None:
            # Free the batch slot and KV now, even if the output is still held: the stream ends here.
            self.server.engine.abort(seq)
        framing = self.framing
        if not self.req.stream:
            if end == RESET:
                self._emit([], RESET)
            elif finished:
                self._emit([(framing.full(self, seq.generated), seq.generated, ())], _DONE)
            return  # non-streamed: nothing to send until the last token
        # A stream ended by a fault never reports its finish, even if the engine happened to finish.
        final = finished and end is None
        items: list[_Out] = [(b, n, ()) for b, n in framing.tokens(self, seq.generated - n_tokens, n_tokens, final)]
        if plan is not None and plan.malformed_at and not self.malformed_sent and seq.generated >= plan.malformed_at:
            self.malformed_sent = True
            items.insert(0, (framing.truncated(items[0][0]), 0, (MALFORMED,)))
        if final:
            items.append((framing.end(self, seq.generated), 0, ()))
            end = _DONE
        elif end == ERROR_EVENT:
            items.append((framing.error_event(), 0, ()))
        self._emit(items, end)

    def abort(self) -> None:
        if self.hold is not None:  # the timer would write to a dead connection and keep this object alive
            self.hold.cancel()
            self.hold = None
        if self.seq is not None:
            self.server.engine.abort(self.seq)
        if self.server.truth is not None:
            self.server.truth.abort(self.rid, self.server.name, time.monotonic())
