"""The Weka agentic coding traces (kv-cache-tester's format; the SemiAnalysis ``cc-traces-weka-*`` corpora) read
into loadgen's neutral agent graph (agent_graph.py; the readers: agent_traces.py).

A trace is one JSON object per conversation: a file of its own (kv-cache-tester writes a directory of them) or one
line of a JSONL (the Hugging Face corpora ship ``traces.jsonl``); a JSON list of them is read too. Fields read:

- trace: ``id`` (string), ``block_size`` (tokens per hash id, > 0), ``requests`` (list), ``hash_id_scope``
  (``"local"``, the default: ids are numbered per conversation; ``"global"``: they compare across the file's traces).
- call (``type`` ``"n"`` or ``"s"``, read alike): ``t`` (seconds), ``in`` (prompt tokens, >= 1), ``out`` (reply
  tokens, >= 0), ``hash_ids`` (optional; at most ceil(in / block_size): the full blocks, and for some corpora one
  trailing partial block), ``api_time`` (optional, seconds: the call's recorded duration, hence its end).
- sub-agent (``type`` ``"subagent"``): ``t`` (spawn), ``requests`` (its calls, same schema; nested sub-agents are
  read too), ``duration_ms`` (optional: its recorded end; else its last call's end), ``agent_id``,
  ``subagent_type``. One without calls is left out.

Ignored: ``model`` / ``models`` (the replay picks the model), ``stop``, ``input_types``, ``output_types``, ``ttft``,
``think_time`` (the gap comes from ``t`` and ``api_time``), ``tool_tokens``, ``system_tokens``, ``status``,
``total_tokens``, ``tool_use_count``, ``totals``, ``_analysis``. Calls of one session are sequential in the graph:
parallel agents that a capture flattened into the parent's list (AIPerf splits them by hash-id prefix chains) are
not split here.

Sub-agent call times come in two conventions: kv-cache-tester's raw traces give them relative to the sub-agent's
marker, the SemiAnalysis corpora as absolute trace times. One convention holds for a whole file: ``auto`` reads it as
relative when any sub-agent's call is timed before its own marker (impossible in absolute time), else absolute; an
explicit ``absolute`` makes such a call an error (a child before its parent).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from loadgen.traffic.agent_graph import (
    _EPS,
    TraceSession,
    _Call,
    _documents,
    _fail,
    _hash_ids,
    _Node,
    _root,
    _seconds,
    _whole,
)

__all__ = ["parse_weka"]


def _relative_evidence(requests: Any) -> bool:
    """Whether any sub-agent's call is timed before its marker (only relative times allow that). Loose: the strict
    pass reports malformed entries."""
    if not isinstance(requests, list):
        return False
    for entry in requests:
        if not isinstance(entry, dict) or entry.get("type") != "subagent":
            continue
        t, inner = entry.get("t"), entry.get("requests")
        if not _number(t) or not isinstance(inner, list):
            continue
        if any(isinstance(r, dict) and _number(r.get("t")) and r["t"] + _EPS < t for r in inner):
            return True
        if _relative_evidence(inner):
            return True
    return False


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


class _Trace:
    """One trace's strict pass: fields checked, times put on the root's clock."""

    def __init__(self, file: str, line: int | None, prefix: str, root_id: str, block: int, relative: bool) -> None:
        self.file, self.line, self.prefix = file, line, prefix
        self.root_id, self.block, self.relative = root_id, block, relative
        self.seen_ids: set[str] = set()

    def fail(self, where: str, message: str) -> Exception:
        return _fail(self.file, self.line, self.prefix + where, message)

    def need(self, entry: dict[str, Any], key: str, where: str, what: str) -> Any:
        if key not in entry:
            raise self.fail(f"{where}.{key}", f"missing ({what})")
        return entry[key]

    def walk(self, requests: list[Any], node: _Node, where: str, base: float, marker: float | None) -> None:
        for i, entry in enumerate(requests):
            at = f"{where}requests[{i}]"
            if not isinstance(entry, dict):
                raise self.fail(at, f"expected a JSON object (a call or a sub-agent), got {type(entry).__name__}")
            kind = entry.get("type")
            if kind not in ("n", "s", "subagent"):
                raise self.fail(f"{at}.type", f'expected "n", "s" or "subagent", got {kind!r}')
            t = self.need(entry, "t", at, "seconds")
            t_abs = base + _checked(_seconds, t, self, f"{at}.t")
            if marker is not None and t_abs + _EPS < marker:
                raise self.fail(
                    f"{at}.t",
                    f"{t!r} is before its sub-agent's spawn at {marker:g} s: a child before its parent (this file's "
                    "sub-agent times are read as absolute)",
                )
            if kind == "subagent":
                self.subagent(entry, node, at, t_abs, i)
            else:
                self.call(entry, node, at, t_abs)

    def call(self, entry: dict[str, Any], node: _Node, at: str, t_abs: float) -> None:
        n_in = _checked(_whole, self.need(entry, "in", at, "prompt tokens"), self, f"{at}.in", 1)
        n_out = _checked(_whole, self.need(entry, "out", at, "reply tokens"), self, f"{at}.out", 0)
        ids = _checked(_hash_ids, entry.get("hash_ids", []), self, f"{at}.hash_ids")
        if len(ids) > -(-n_in // self.block):
            raise self.fail(
                f"{at}.hash_ids",
                f"{len(ids)} blocks of {self.block} tokens is more than the prompt's {n_in} tokens hold "
                f"(at most {-(-n_in // self.block)})",
            )
        duration = _checked(_seconds, entry.get("api_time"), self, f"{at}.api_time", optional=True)
        place = f"{self.file}:{self.line}" if self.line is not None else self.file
        place = f"{place}: {self.prefix}{at}"
        node.calls.append(_Call(t_abs, duration, n_in, n_out, ids, self.block, place))

    def subagent(self, entry: dict[str, Any], node: _Node, at: str, t_abs: float, index: int) -> None:
        inner = self.need(entry, "requests", at, "the sub-agent's calls")
        if not isinstance(inner, list):
            raise self.fail(f"{at}.requests", f"expected a list of calls, got {type(inner).__name__}")
        duration_ms = entry.get("duration_ms")
        if duration_ms is not None and not (_number(duration_ms) and duration_ms >= 0):
            raise self.fail(f"{at}.duration_ms", f"expected milliseconds >= 0 or null, got {duration_ms!r}")
        agent_id = entry.get("agent_id", f"subagent-{index}")
        kind = entry.get("subagent_type", "")
        for key, value in (("agent_id", agent_id), ("subagent_type", kind)):
            if not isinstance(value, str):
                raise self.fail(f"{at}.{key}", f"expected a string, got {value!r}")
        child_id = f"{self.root_id}/{agent_id}"
        if child_id in self.seen_ids:
            child_id = f"{child_id}#{index}"
        self.seen_ids.add(child_id)
        child = _Node(child_id, kind)
        self.walk(inner, child, f"{at}.", t_abs if self.relative else 0.0, None if self.relative else t_abs)
        end = t_abs + duration_ms / 1000.0 if duration_ms is not None else None
        node.kids.append((t_abs, end, child))


def _checked(check: Any, value: Any, trace: _Trace, where: str, *args: Any, **kwargs: Any) -> Any:
    """Run one of agent_traces' field checks with this trace's file, line and entry prefix."""
    return check(value, *args, trace.file, trace.line, trace.prefix + where, **kwargs)


def _shift(node: _Node, origin: float) -> None:
    for call in node.calls:
        call.at -= origin
    node.kids = [(s - origin, None if e is None else e - origin, kid) for s, e, kid in node.kids]
    for _, _, kid in node.kids:
        _shift(kid, origin)


def _origin(node: _Node) -> float:
    times = [c.at for c in node.calls] + [s for s, _, _ in node.kids]
    times += [_origin(kid) for _, _, kid in node.kids if kid.calls or kid.kids]
    return min(times, default=math.inf)


def parse_weka(
    file: str, data: bytes, max_gap_s: float | None, subagent_times: Literal["auto", "absolute", "relative"]
) -> list[TraceSession]:
    docs = _documents(file, data)
    if subagent_times == "auto":
        relative = any(isinstance(d, dict) and _relative_evidence(d.get("requests")) for _, _, d in docs)
    elif subagent_times in ("absolute", "relative"):
        relative = subagent_times == "relative"
    else:
        raise ValueError(f"subagent_times: expected 'auto', 'absolute' or 'relative', got {subagent_times!r}")
    sessions: list[TraceSession] = []
    ids: set[str] = set()
    for line, prefix, doc in docs:
        if not isinstance(doc, dict):
            raise _fail(
                file, line, prefix.rstrip("."), f"expected a JSON object (a Weka trace), got {type(doc).__name__}"
            )
        for key, what in (("id", "the trace's id"), ("block_size", "tokens per hash id"), ("requests", "its calls")):
            if key not in doc:
                raise _fail(file, line, prefix + key, f"missing ({what})")
        trace_id = doc["id"]
        if not isinstance(trace_id, str) or not trace_id:
            raise _fail(file, line, prefix + "id", f"expected a non-empty string, got {trace_id!r}")
        if trace_id in ids:
            raise _fail(file, line, prefix + "id", f"{trace_id!r} appears twice in the file")
        ids.add(trace_id)
        block = _whole(doc["block_size"], 1, file, line, prefix + "block_size")
        scope = doc.get("hash_id_scope", "local")
        if scope not in ("local", "global"):
            raise _fail(file, line, prefix + "hash_id_scope", f'expected "local" or "global", got {scope!r}')
        requests = doc["requests"]
        if not isinstance(requests, list):
            raise _fail(file, line, prefix + "requests", f"expected a list of calls and sub-agents, got {requests!r}")
        root = _Node(trace_id, "")
        _Trace(file, line, prefix, trace_id, block, relative).walk(requests, root, "", 0.0, None)
        origin = _origin(root)
        if not root.calls and not any(kid.calls or kid.kids for _, _, kid in root.kids):
            raise _fail(file, line, prefix + "requests", 'no model call (type "n" or "s") in the trace')
        _shift(root, origin)
        session = _root(root, max_gap_s)
        if scope == "global":
            session = _rescope(session, file)
        sessions.append(session)
    return sessions


def _rescope(session: TraceSession, scope: str) -> TraceSession:
    from dataclasses import replace

    children = tuple(replace(c, session=_rescope(c.session, scope)) for c in session.children)
    return replace(session, children=children, hash_scope=scope)
