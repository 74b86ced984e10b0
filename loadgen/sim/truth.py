"""Ground-truth log: when the simulator wrote each token-carrying chunk (and which faults it injected), to grade
the load generator against.

Timestamps are ``time.monotonic()`` (CLOCK_MONOTONIC, system-wide on Linux), taken immediately before the
``transport.write`` of the chunk, so a client process on the same machine can compare its own receive times.

Recording appends a tuple to an in-memory list (the hot path stays a few hundred ns); a flusher task swaps the
list out about once a second and formats + writes it on a worker thread, so file I/O never stalls the event loop
that is timing the streams.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import orjson

# (kind, rid, variant, t, n, fault, t_end) -- n is 0 except for tokens, reasoning, the cached tokens of `scheduled` and
# an adapter's load (1: paid); fault is an injected fault's name, an arrival's `traceparent` header (when the request
# carried one) or an adapter record's model, else ""; t_end (tokens only, else 0.0) is taken right after the write.
_Record = tuple[str, str, str, float, int, str, float]


class TruthLog:
    """Buffered JSONL writer of chunk/arrival/finish/fault times. Not thread-safe: record from the loop thread only."""

    def __init__(self, path: Path | str, flush_interval: float = 1.0) -> None:
        self.path = Path(path)
        self.flush_interval = flush_interval
        self._buf: list[_Record] = []
        self._file: IO[bytes] | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping: asyncio.Event | None = None

    def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # Truncate: one log per simulator run; a stale tail would corrupt the reader's picture.
        self._file = self.path.open("wb")

    # ---- hot path ----
    def token(self, rid: str, variant: str, t: float, n: int, t_end: float) -> None:
        """``n`` tokens written: the clock read just before the write (``t``) and just after it (``t_end``). The bytes
        left inside that interval; it is wide only when the simulator itself was held up (its truth-log thread holding
        the GIL, a busy CPU), which graders should not count against the client."""
        self._buf.append(("token", rid, variant, t, n, "", t_end))

    def arrival(self, rid: str, variant: str, t: float, traceparent: str = "") -> None:
        """A request arrived; `traceparent`: the W3C trace header it carried ("": none), the ids its spans join."""
        self._buf.append(("arrival", rid, variant, t, 0, traceparent, 0.0))

    def scheduled(self, rid: str, variant: str, t: float, cached: int = 0) -> None:
        """When the engine admitted the request (its queue time ends, its prefill begins), and how many of its
        prompt tokens the prefix cache held then."""
        self._buf.append(("scheduled", rid, variant, t, cached, "", 0.0))

    def adapter(self, rid: str, variant: str, t: float, model: str, loaded: bool) -> None:
        """A variant serving LoRA adapters admitted the request at `t`: the model it asked for (an adapter's name, or
        the base model's), and whether its admission loaded that adapter (its step paid the profile's load time)."""
        self._buf.append(("adapter", rid, variant, t, int(loaded), model, 0.0))

    def finish(self, rid: str, variant: str, t: float) -> None:
        self._buf.append(("finish", rid, variant, t, 0, "", 0.0))

    def output(self, rid: str, variant: str, t: float, perturbed: frozenset[int]) -> None:
        """A greedy request (``temperature: 0``): the reply's positions that differ from the baseline's (the
        profile's ``perturb_share``), carried in the record's text field until written."""
        self._buf.append(("output", rid, variant, t, 0, ",".join(map(str, sorted(perturbed))), 0.0))

    def reasoning(self, rid: str, variant: str, t: float, n: int) -> None:
        """A reasoning profile's request: its first ``n`` tokens are thinking (``reasoning_content``)."""
        self._buf.append(("reasoning", rid, variant, t, n, "", 0.0))

    def reply(self, rid: str, variant: str, t: float, reasoning: int, tool_call: str, tool_result: str = "") -> None:
        """What the reply is made of beyond plain content: its first ``reasoning`` tokens thinking (0: none), and
        ``tool_call`` the function it calls instead of answering ("": none); ``tool_result``: the id of the tool call
        whose result the request sent back (``role: tool``; "": none)."""
        if reasoning:
            self.reasoning(rid, variant, t, reasoning)
        if tool_call:
            self.tool_call(rid, variant, t, tool_call)
        if tool_result:
            self._buf.append(("tool_result", rid, variant, t, 0, tool_result, 0.0))

    def tool_call(self, rid: str, variant: str, t: float, name: str) -> None:
        """An OpenAI chat request with tools answered by a call of function ``name`` instead of content: every token
        of its reply after the thinking is a ``delta.tool_calls`` piece (``TruthRequest.first_tool_call``)."""
        self._buf.append(("tool_call", rid, variant, t, 0, name, 0.0))

    def abort(self, rid: str, variant: str, t: float) -> None:
        self._buf.append(("abort", rid, variant, t, 0, "", 0.0))

    def fault(self, rid: str, variant: str, t: float, fault: str) -> None:
        """An injected fault (``loadgen.sim.faults.FAULT_NAMES``) taking effect at ``t``."""
        self._buf.append(("fault", rid, variant, t, 0, fault, 0.0))

    # ---- flushing ----
    def start(self) -> None:
        """Open the file and start the periodic flusher on the running loop."""
        if self._file is None:
            self.open()
        if self._task is None:
            self._stopping = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(
                self._flush_periodically(self._stopping), name="sim-truth-log"
            )

    async def _flush_periodically(self, stopping: asyncio.Event) -> None:
        # Stopped by an event rather than cancelled: a cancelled to_thread() leaves its write running, and the
        # final flush could then interleave with it.
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), self.flush_interval)
            batch, self._buf = self._buf, []
            if batch:
                await asyncio.to_thread(self._write, batch)

    def _write(self, batch: Iterable[_Record]) -> None:
        if self._file is None:
            return
        dumps = orjson.dumps
        lines = []
        for kind, rid, variant, t, n, fault, t_end in batch:
            if kind == "token":
                rec: dict[str, object] = {"rid": rid, "variant": variant, "t": t, "n": n, "kind": kind, "t_end": t_end}
            elif kind == "reasoning":
                rec = {"rid": rid, "variant": variant, "t": t, "n": n, "kind": kind}
            elif kind == "fault":
                rec = {"rid": rid, "variant": variant, "kind": kind, "fault": fault, "t": t}
            elif kind == "arrival" and fault:
                rec = {"rid": rid, "variant": variant, "kind": kind, "t": t, "traceparent": fault}
            elif kind == "scheduled":
                rec = {"rid": rid, "variant": variant, "kind": kind, "t": t, "cached": n}
            elif kind == "tool_call":
                rec = {"rid": rid, "variant": variant, "kind": kind, "t": t, "tool": fault}
            elif kind == "tool_result":
                rec = {"rid": rid, "variant": variant, "kind": kind, "t": t, "tool_call_id": fault}
            elif kind == "adapter":
                rec = {"rid": rid, "variant": variant, "kind": kind, "t": t, "model": fault, "lora_load": bool(n)}
            elif kind == "output":
                rec = {
                    "rid": rid,
                    "variant": variant,
                    "kind": kind,
                    "t": t,
                    "perturbed": [int(i) for i in fault.split(",") if i],
                }
            else:
                rec = {"rid": rid, "variant": variant, "kind": kind, "t": t}
            lines.append(dumps(rec))
        lines.append(b"")
        self._file.write(b"\n".join(lines))
        self._file.flush()

    def flush(self) -> None:
        """Write everything recorded so far (synchronously: used at shutdown and by tests)."""
        batch, self._buf = self._buf, []
        if batch:
            self._write(batch)

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None and self._stopping is not None:
            self._stopping.set()
            await task
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None


@dataclass(slots=True)
class TruthRequest:
    rid: str
    variant: str
    arrival: float | None = None
    scheduled: float | None = None
    #: Prompt tokens the prefix cache held when the engine admitted it (0: none, or no prefix caching).
    cached_tokens: int = 0
    finish: float | None = None
    aborted: bool = False
    chunk_times: list[float] = field(default_factory=list)
    #: For each chunk, the clock read right after its write returned: its bytes left in [chunk_times, chunk_ends].
    chunk_ends: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    #: Injected faults, in the order they took effect (``loadgen.sim.faults.FAULT_NAMES``).
    faults: list[str] = field(default_factory=list)
    #: A greedy request (``temperature: 0``), and its reply's token positions that differ from the baseline's.
    greedy: bool = False
    perturbed: list[int] = field(default_factory=list)
    #: A reasoning profile's request: how many of its first tokens were thinking (``reasoning_content``).
    reasoning_tokens: int = 0
    #: The W3C ``traceparent`` header the request arrived with (None: it carried none).
    traceparent: str | None = None
    #: A variant serving LoRA adapters: the model it asked for (an adapter's name or the base model's; None: the
    #: variant serves none, or it was never admitted), and whether its admission paid the adapter's load.
    model: str | None = None
    lora_load: bool = False

    #: The function the reply called instead of answering (OpenAI chat with tools), None: it called none.
    tool_call: str | None = None
    #: The id of the tool call whose result (``role: tool``) the request sent back, None: it sent none.
    tool_result: str | None = None

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)

    @property
    def first_tool_call(self) -> float | None:
        """The write of the reply's first tool-call piece: its first token chunk past the thinking (None: no call)."""
        if self.tool_call is None:
            return None
        seen = 0
        for t, n in zip(self.chunk_times, self.chunk_tokens, strict=True):
            seen += n
            if seen > self.reasoning_tokens:
                return t
        return None

    @property
    def first_token(self) -> float | None:
        return self.chunk_times[0] if self.chunk_times else None


def load_truth(path: Path | str, variant: str | None = None) -> dict[str, TruthRequest]:
    """Read a truth log into ``{request_id: TruthRequest}``, chunks in write order.

    The same request id may legitimately hit several variants (paired replay); pass ``variant`` to pick one.
    Without it, an id seen under two variants is an error rather than a silent merge.
    """
    out: dict[str, TruthRequest] = {}
    with Path(path).open("rb") as f:
        for line in f:
            if not line.strip():
                continue
            rec = orjson.loads(line)
            rid, var = rec["rid"], rec["variant"]
            if variant is not None and var != variant:
                continue
            req = out.get(rid)
            if req is None:
                req = out[rid] = TruthRequest(rid, var)
            elif req.variant != var:
                raise ValueError(
                    f"request id {rid!r} appears under variants {req.variant!r} and {var!r}: pass variant="
                )
            kind = rec["kind"]
            if kind == "token":
                req.chunk_times.append(rec["t"])
                req.chunk_ends.append(rec.get("t_end", rec["t"]))
                req.chunk_tokens.append(rec["n"])
            elif kind == "arrival":
                req.arrival = rec["t"]
                req.traceparent = rec.get("traceparent", req.traceparent)
            elif kind == "scheduled":
                req.scheduled = rec["t"]
                req.cached_tokens = rec.get("cached", 0)
            elif kind == "finish":
                req.finish = rec["t"]
            elif kind == "abort":
                req.aborted = True
                req.finish = rec["t"]
            elif kind == "fault":
                req.faults.append(rec["fault"])
            elif kind == "output":
                req.greedy, req.perturbed = True, list(rec["perturbed"])
            elif kind == "reasoning":
                req.reasoning_tokens = rec["n"]
            elif kind == "tool_call":
                req.tool_call = rec["tool"]
            elif kind == "tool_result":
                req.tool_result = rec["tool_call_id"]
            elif kind == "adapter":
                req.model, req.lora_load = rec["model"], rec["lora_load"]
    return out
