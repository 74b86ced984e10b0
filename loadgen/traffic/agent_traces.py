"""Agentic traces read into one neutral graph: sessions of model calls, sub-agents spawned and joined, recorded gaps.

Two source formats (each read by its own module, documented there and in docs/traffic.md):

- **weka** (``agent_trace_weka``): the Weka kv-cache-tester traces (the SemiAnalysis ``cc-traces-weka-*`` corpora):
  one JSON object per conversation, in a file of its own or one per line of a JSONL.
- **otel** (``agent_trace_otel``): OpenTelemetry spans following the GenAI semantic conventions (``chat`` model
  calls, ``invoke_agent`` agents), as OTLP JSON (``resourceSpans``) or a flat ``{"spans": [...]}`` export.

The graph, the same for both:

- A ``TraceSession`` is one agent's calls in recorded order (sequential: call k+1 is sent after call k ends) and the
  sub-agents it spawns. A ``TraceChild`` is spawned when the parent's call ``after_call`` ends (-1: at the parent's
  start) and joined before the parent's call ``join_before`` is sent (``len(calls)``: at the parent's end, which waits
  for it). Usually ``join_before == after_call + 1``; a child the recorded parent did not wait for (its next call
  started before the child ended) is joined at the first call that started after the child's recorded end.
- ``TraceCall.gap_before_s`` is the idle time to wait before sending the call once everything it waits on is done:
  the recorded start minus the latest of (the previous call's end, the ends of the children joined before it; for a
  session's first call, its spawn point), never below 0 and capped at ``max_gap_s``. A call's end is its start plus
  its recorded duration when the format gives one (OTel always, Weka when ``api_time`` is recorded), else its start:
  then the gap is start to start and holds the recorded server time too.
- ``TraceCall.at_s`` is the recorded start, seconds from the root session's first event, never capped;
  ``TraceCall.offset_s`` is that start on the replay's clock (`timing: offsets`): every stretch of the root's clock in
  which no call of the root or its sub-agents is in flight, longer than ``max_gap_s``, is cut to it, and each call
  moves up by what was cut before it (no cap: ``at_s``).
- Hash ids name blocks of ``block_tokens`` prompt tokens, chained as Mooncake's are (two calls whose first k ids
  agree share k blocks of prefix). They compare only within one ``hash_scope`` (a root session and its children):
  Weka numbers its blocks per conversation, so equal ids in two traces are different blocks.

A malformed file raises ``SubpathIssues`` (as trace_file.py does) naming the file, the line where the format has
lines, the entry path (``requests[4].requests[0].in``, ``span 7f3a...``) and what was expected.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal

from loadgen.traffic.agent_graph import TraceCall, TraceChild, TraceSession, _fail
from loadgen.traffic.agent_trace_otel import parse_otel
from loadgen.traffic.agent_trace_weka import parse_weka

__all__ = [
    "TraceCall",
    "TraceChild",
    "TraceSession",
    "detect_agent_format",
    "read_agent_trace",
    "read_otel",
    "read_weka",
]


# --- reading ----------------------------------------------------------------------------------------------------

Format = Literal["weka", "otel"]


def detect_agent_format(path: str, head: bytes) -> Format:
    """The format of an agentic trace from its first bytes: OTel exports name ``resourceSpans`` or ``spans``, a Weka
    trace ``requests``."""
    text = head[:65536]
    if b'"resourceSpans"' in text or b'"spans"' in text:
        return "otel"
    if b'"requests"' in text:
        return "weka"
    raise _fail(
        path,
        None,
        "",
        "not an agentic trace loadgen knows: expected a Weka trace (a JSON object with id, block_size, requests; one "
        'per file or per line) or OpenTelemetry spans (OTLP JSON with resourceSpans, or {"spans": [...]})',
    )


def _check_cap(max_gap_s: float | None) -> None:
    if max_gap_s is not None and (isinstance(max_gap_s, bool) or not math.isfinite(max_gap_s) or max_gap_s < 0):
        raise ValueError(f"max_gap_s: expected seconds >= 0 or None, got {max_gap_s!r}")


def _files(path: str, max_gap_s: float | None) -> list[Path]:
    _check_cap(max_gap_s)
    p = Path(path)
    if p.is_dir():
        files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in (".json", ".jsonl"))
        if not files:
            raise _fail(path, None, "", "the directory holds no .json or .jsonl file")
        return files
    return [p]


def _read(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise _fail(str(path), None, "", f"cannot read the trace: {exc.strerror or exc}") from None
    if not data.strip():
        raise _fail(str(path), None, "", "the trace is empty")
    return data


def read_weka(
    path: str,
    *,
    max_gap_s: float | None = None,
    subagent_times: Literal["auto", "absolute", "relative"] = "auto",
) -> list[TraceSession]:
    """The sessions of a Weka trace file (one JSON object, a JSON list of them, or JSONL), or of every .json/.jsonl
    file of a directory, in file order."""
    return [s for f in _files(path, max_gap_s) for s in parse_weka(str(f), _read(f), max_gap_s, subagent_times)]


def read_otel(path: str, *, max_gap_s: float | None = None) -> list[TraceSession]:
    """The sessions of an OpenTelemetry GenAI span export (OTLP JSON, one object or JSONL; or ``{"spans": [...]}``),
    or of every .json/.jsonl file of a directory: one root session per trace id, in order of first appearance."""
    return [s for f in _files(path, max_gap_s) for s in parse_otel(str(f), _read(f), max_gap_s)]


def read_agent_trace(path: str, *, max_gap_s: float | None = None) -> list[TraceSession]:
    """The sessions of an agentic trace file (or a directory of them), each file's format recognised from its
    content."""
    sessions: list[TraceSession] = []
    for f in _files(path, max_gap_s):
        data = _read(f)
        if detect_agent_format(str(f), data) == "weka":
            sessions += parse_weka(str(f), data, max_gap_s, "auto")
        else:
            sessions += parse_otel(str(f), data, max_gap_s)
    return sessions
