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

# (kind, rid, variant, t, n, fault) -- n is 0 except for tokens, fault is "" except for injected faults.
_Record = tuple[str, str, str, float, int, str]


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
    def token(self, rid: str, variant: str, t: float, n: int) -> None:
        self._buf.append(("token", rid, variant, t, n, ""))

    def arrival(self, rid: str, variant: str, t: float) -> None:
        self._buf.append(("arrival", rid, variant, t, 0, ""))

    def finish(self, rid: str, variant: str, t: float) -> None:
        self._buf.append(("finish", rid, variant, t, 0, ""))

    def abort(self, rid: str, variant: str, t: float) -> None:
        self._buf.append(("abort", rid, variant, t, 0, ""))

    def fault(self, rid: str, variant: str, t: float, fault: str) -> None:
        """An injected fault (``loadgen.sim.faults.FAULT_NAMES``) taking effect at ``t``."""
        self._buf.append(("fault", rid, variant, t, 0, fault))

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
        for kind, rid, variant, t, n, fault in batch:
            if kind == "token":
                rec: dict[str, object] = {"rid": rid, "variant": variant, "t": t, "n": n, "kind": kind}
            elif kind == "fault":
                rec = {"rid": rid, "variant": variant, "kind": kind, "fault": fault, "t": t}
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
    finish: float | None = None
    aborted: bool = False
    chunk_times: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    #: Injected faults, in the order they took effect (``loadgen.sim.faults.FAULT_NAMES``).
    faults: list[str] = field(default_factory=list)

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)

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
                req.chunk_tokens.append(rec["n"])
            elif kind == "arrival":
                req.arrival = rec["t"]
            elif kind == "finish":
                req.finish = rec["t"]
            elif kind == "abort":
                req.aborted = True
                req.finish = rec["t"]
            elif kind == "fault":
                req.faults.append(rec["fault"])
    return out
