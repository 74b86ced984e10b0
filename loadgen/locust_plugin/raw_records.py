"""A worker's raw record shard (`--raw-records DIR`): one JSONL file per run and process.

Rows are flushed at least every `_RAW_FLUSH_S` (and every 256 rows), so a SIGKILLed worker loses only its in-flight
requests and at most that much of its finished ones. They go out in the order they enter the aggregate, so `rows`
tells the master which rows its last report already covered.

A write that fails (a full disk, a quota, a folder removed under the run) stops the shard, never the worker: the
error is logged once, naming the worker and the folder; the rows of the batch that failed are cut back out of the
file (a row is in the shard whole or not at all), and every later row is counted as lost instead of written. The
histograms and counters the worker ships to its master are not touched by any of it, and the report names the
worker and the rows its shard is missing (`run.raw_records_lost`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import gevent
import orjson

from loadgen.measure.records import RequestRecord

__all__ = ["RawRecordWriter"]

log = logging.getLogger("loadgen")
_RAW_FLUSH_S = 0.25
_BATCH = 256


class RawRecordWriter:
    """Rows of one process's run into `directory / records-{tag}.jsonl`; `rows` counts every row given to it (the
    shard's row numbers), `lost` those not in the shard because writing failed (`error` says why)."""

    def __init__(self, directory: Path, tag: str, worker: str = "") -> None:
        self.path = directory / f"records-{tag}.jsonl"
        self.worker = worker or tag
        self._pending: list[bytes] = []
        self.rows = 0
        self.lost = 0
        self.error: str | None = None
        self._fd = -1
        self._size = 0  # the shard's length up to its last whole row written
        try:
            directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
            self._size = os.fstat(self._fd).st_size
        except OSError as e:
            self._fail(e)
        self._flusher = gevent.spawn(self._flush_periodically)

    def write(self, rec: RequestRecord) -> None:
        self.rows += 1
        if self.error is not None:
            self.lost += 1
            return
        self._pending.append(orjson.dumps(rec.to_json(), option=orjson.OPT_APPEND_NEWLINE))
        if len(self._pending) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        """Write the pending rows; on an error, stop writing (see the module docstring). Never raises."""
        pending = self._pending
        if not pending or self.error is not None:
            return
        data = memoryview(b"".join(pending))
        try:
            while data:
                n = os.write(self._fd, data)
                data = data[n:]
        except OSError as e:
            # The batch's whole rows out again (truncating frees space, so it works on a full disk).
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._size)
            self.lost += len(pending)
            pending.clear()
            self._fail(e)
            return
        self._size += sum(map(len, pending))
        pending.clear()

    def _fail(self, e: OSError) -> None:
        what = os.strerror(e.errno) if e.errno else str(e)
        self.error = f"{type(e).__name__}: [Errno {e.errno}] {what}"
        log.error(
            "loadgen: %s: writing raw records to %s failed (%s); raw records are no longer written (histograms and "
            "counters still reach the master; the report counts the rows lost)",
            self.worker,
            self.path.parent,
            self.error,
        )
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1

    def status(self) -> dict[str, Any]:
        """What the master needs of the shard: where it is, and what is missing from it and why."""
        out: dict[str, Any] = {"path": str(self.path.resolve())}
        if self.error is not None:
            out |= {"lost": self.lost, "error": self.error, "folder": str(self.path.parent.resolve())}
        return out

    def _flush_periodically(self) -> None:
        while True:
            gevent.sleep(_RAW_FLUSH_S)
            self.flush()

    def close(self) -> None:
        self._flusher.kill(block=False)
        self.flush()
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError as e:
                self._fail(e)
            self._fd = -1
