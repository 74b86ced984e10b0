"""A scenario's `traffic.trace` read for replay: the rows of a production trace, windowed and scaled, once per process.

Three formats, the ones the field publishes:

- **mooncake** (JSONL): ``{"timestamp": ms, "input_length": n, "output_length": n, "hash_ids": [int, ...]}``; each
  hash id names a block of ``block_tokens`` prompt tokens (Mooncake's traces: 512), and a block id is the chained
  hash of everything before it, so two rows whose first k ids agree share exactly k blocks of prefix.
- **azure** (CSV, the Azure LLM inference traces): ``TIMESTAMP`` (``2023-11-16 18:15:46.6805900``),
  ``ContextTokens``, ``GeneratedTokens``. The traces' times carry no zone: they are read as UTC, never as the
  machine's local time (a daylight-saving change inside the trace would shift every offset after it by an hour, and
  the same trace would replay differently on two machines); a time with an offset keeps it.
- **burstgpt** (CSV): ``Timestamp`` (seconds), ``Request tokens``, ``Response tokens`` (other columns: ``Model``,
  ``Total tokens``, ``Log Type``). A row with 0 response tokens is one of the trace's failures: left out, counted.

A row's offset is its timestamp minus the trace's first, in seconds; the window keeps the rows with
``start <= offset < start + duration`` (trace time) and replays them from 0: ``(offset - start) * time_scale``.
The rows are sorted by time (stably), so a trace written out of order replays in order.

A malformed row raises ``SubpathIssues`` naming ``path`` with the file, line and column, as a dataset's does; the
preflight step (loadgen/preflight.py) turns it into exit 2 before any load. The sampler and the dispatcher get the
same rows from this module's cache.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from loadgen.config.errors import SubpathIssues
from loadgen.config.trace import TraceReplay

__all__ = ["Trace", "TraceRow", "detect_format", "read_trace", "trace_of"]

# (line, timestamp in seconds, input tokens, output tokens, hash ids) as read, before the window.
_RawRow = tuple[int, float, int, int, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One replayed row: its line in the file, its send offset (seconds from the run's start, scaled), its
    lengths and (mooncake) its prompt's block ids."""

    line: int
    offset: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Trace:
    """The window of a trace, in send order."""

    format: str
    rows: tuple[TraceRow, ...]
    rows_in_file: int
    failed_left_out: int  # burstgpt rows with 0 response tokens
    span_s: float  # the window's length after time_scale: (start + duration or the last row) - start, scaled

    @property
    def offsets(self) -> tuple[float, ...]:
        return tuple(row.offset for row in self.rows)


_CACHE: dict[tuple[str, str | None, float, float, float | None], Trace] = {}


def trace_of(replay: TraceReplay) -> Trace:
    """The replayed window of ``replay`` (read once per process)."""
    key = (str(Path(replay.path).absolute()), replay.format, replay.time_scale, replay.start, replay.duration)
    trace = _CACHE.get(key)
    if trace is None:
        trace = _CACHE[key] = read_trace(replay)
    return trace


def _fail(path: str, line: int | None, message: str) -> SubpathIssues:
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    return SubpathIssues([(("path",), where + message)])


def detect_format(path: str, head: bytes) -> str:
    """The format of a trace from its first line."""
    first = head.split(b"\n", 1)[0].strip().lstrip(b"\xef\xbb\xbf")
    if first.startswith(b"{"):
        return "mooncake"
    columns = {c.strip() for c in first.decode("utf-8", "replace").split(",")}
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= columns:
        return "azure"
    if {"Timestamp", "Request tokens", "Response tokens"} <= columns:
        return "burstgpt"
    raise _fail(
        path,
        1,
        "not a trace loadgen knows: expected a Mooncake JSONL row ({timestamp, input_length, output_length, "
        "hash_ids}), or a CSV header with TIMESTAMP, ContextTokens, GeneratedTokens (Azure) or Timestamp, "
        "Request tokens, Response tokens (BurstGPT); set traffic.trace.format to say which",
    )


def read_trace(replay: TraceReplay) -> Trace:
    path = replay.path
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise _fail(path, None, f"cannot read the trace: {exc.strerror or exc}") from None
    if not data.strip():
        raise _fail(path, None, "the trace is empty")
    fmt = replay.format or detect_format(path, data)
    failed = 0
    if fmt == "mooncake":
        raw = _mooncake(path, data)
    else:
        raw, failed = _csv_rows(path, data, fmt)
    if not raw:
        raise _fail(path, None, "no rows to replay" + (f" ({failed} failed rows left out)" if failed else ""))
    raw.sort(key=lambda r: r[1])  # stable: rows with one timestamp keep their file order
    first = raw[0][1]
    end = math.inf if replay.duration is None else replay.start + replay.duration
    rows = tuple(
        TraceRow(line, (t - first - replay.start) * replay.time_scale, n_in, n_out, ids)
        for line, t, n_in, n_out, ids in raw
        if replay.start <= t - first < end
    )
    if not rows:
        last = raw[-1][1] - first
        raise SubpathIssues(
            [(("start",), f"the window holds no row: the trace's rows lie {0:g}–{last:g} s from its first")]
        )
    span = (end if replay.duration is not None else raw[-1][1] - first) - replay.start
    return Trace(fmt, rows, len(raw) + failed, failed, span * replay.time_scale)


def _whole(value: Any, path: str, line: int, column: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _fail(path, line, f"{column}: expected a whole number >= {low}, got {value!r}")
    return value


def _mooncake(path: str, data: bytes) -> list[_RawRow]:
    out: list[_RawRow] = []
    for line, text in enumerate(data.split(b"\n"), start=1):
        if not text.strip():
            continue
        try:
            row = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise _fail(path, line, f"not JSON ({exc})") from None
        if not isinstance(row, dict):
            raise _fail(path, line, f"expected a JSON object, got {type(row).__name__}")
        for column in ("timestamp", "input_length", "output_length"):
            if column not in row:
                message = f"{column}: missing (a Mooncake row has timestamp, input_length, output_length)"
                raise _fail(path, line, message)
        ts = row["timestamp"]
        if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts) or ts < 0:
            raise _fail(path, line, f"timestamp: expected milliseconds >= 0, got {ts!r}")
        ids = row.get("hash_ids", [])
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise _fail(path, line, f"hash_ids: expected a list of whole numbers, got {ids!r}")
        n_in = _whole(row["input_length"], path, line, "input_length", 1)
        n_out = _whole(row["output_length"], path, line, "output_length", 1)
        out.append((line, ts / 1000.0, n_in, n_out, tuple(ids)))
    return out


def _utc_seconds(text: str) -> float:
    """Seconds since the epoch of an ISO time; one without a zone is UTC (``datetime.timestamp`` would take the
    machine's local time, DST changes and all)."""
    t = datetime.fromisoformat(text)
    return (t if t.tzinfo is not None else t.replace(tzinfo=UTC)).timestamp()


_CSV_COLUMNS = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
}


def _csv_rows(path: str, data: bytes, fmt: str) -> tuple[list[_RawRow], int]:
    reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig", "replace")))
    t_col, in_col, out_col = _CSV_COLUMNS[fmt]
    fields = [f.strip() for f in reader.fieldnames or ()]
    missing = [c for c in (t_col, in_col, out_col) if c not in fields]
    if missing:
        raise _fail(path, 1, f"the header lacks {', '.join(missing)} (a {fmt} trace has {t_col}, {in_col}, {out_col})")
    reader.fieldnames = fields
    out: list[_RawRow] = []
    failed = 0
    for row in reader:
        line = reader.line_num
        values = {c: (row.get(c) or "").strip() for c in (t_col, in_col, out_col)}
        if fmt == "azure":
            try:
                t = _utc_seconds(values[t_col])
            except ValueError:
                message = f"{t_col}: expected a time like 2023-11-16 18:15:46.68, got {values[t_col]!r}"
                raise _fail(path, line, message) from None
        else:
            try:
                t = float(values[t_col])
            except ValueError:
                t = math.nan
            if not math.isfinite(t) or t < 0:
                raise _fail(path, line, f"{t_col}: expected seconds >= 0, got {values[t_col]!r}")
        counts = []
        for column in (in_col, out_col):
            try:
                counts.append(int(values[column]))
            except ValueError:
                raise _fail(path, line, f"{column}: expected a whole number, got {values[column]!r}") from None
        n_in, n_out = counts
        if fmt == "burstgpt" and n_out == 0:
            failed += 1  # the trace's own failed requests: nothing to ask of a server
            continue
        _whole(n_in, path, line, in_col, 1)
        _whole(n_out, path, line, out_col, 1)
        out.append((line, t, n_in, n_out, ()))
    return out, failed
