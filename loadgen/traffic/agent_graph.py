"""The neutral graph of an agentic trace (sessions, calls, sub-agents) and the helpers its readers share; the
readers and what the fields mean: agent_traces.py."""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from loadgen.config.errors import SubpathIssues

__all__ = ["TraceCall", "TraceChild", "TraceSession"]

_EPS = 1e-6


@dataclass(frozen=True, slots=True)
class TraceCall:
    """One model call as recorded: when, how long its prompt and reply were, which prompt blocks, the wait before it."""

    at_s: float  # recorded start, seconds from the root session's first event (never capped)
    offset_s: float  # at_s less the idle stretches before it cut down to the cap (`_idle_cuts`): the replay's clock
    input_tokens: int  # prompt length
    output_tokens: int  # reply length (0 is possible in Weka traces: send max_tokens >= 1)
    hash_ids: tuple[int, ...]  # the prompt's block ids, in order (() when the format records none)
    block_tokens: int  # tokens per hash id block (0 when hash_ids is empty)
    gap_before_s: float  # idle wait before sending, once the previous call and the joined children are done (capped)
    duration_s: float | None  # recorded duration (end - start) when the format gives ends, else None
    where: str  # the call's place in the file: "trace.jsonl:3: requests[5]" / "spans.json: span 9a1f..."


@dataclass(frozen=True, slots=True)
class TraceChild:
    """A sub-agent: spawned when the parent's call ``after_call`` ends (-1: at the parent's start), joined before the
    parent's call ``join_before`` is sent (``len(parent.calls)``: before the parent session ends)."""

    after_call: int
    join_before: int
    session: TraceSession


@dataclass(frozen=True, slots=True)
class TraceSession:
    """One agent: its calls in order and its sub-agents (ordered by ``after_call``, then recorded spawn time)."""

    id: str  # the trace's id for a root; "<root id>/<agent id>" for a child
    agent: str  # what the format calls the agent ("" for a Weka root, subagent_type, gen_ai.agent.name)
    calls: tuple[TraceCall, ...]
    children: tuple[TraceChild, ...]
    hash_scope: str  # hash ids compare only between sessions of the same scope (a root and its children)

    def walk(self) -> list[TraceSession]:
        """This session and every descendant, depth first."""
        out = [self]
        for child in self.children:
            out.extend(child.session.walk())
        return out


# --- shared construction, used by both readers ----------------------------------------------------------------


@dataclass(slots=True)
class _Call:
    at: float  # seconds from the root's origin
    duration: float | None
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    block_tokens: int
    where: str

    @property
    def end(self) -> float:
        return self.at + (self.duration or 0.0)


@dataclass(slots=True)
class _Node:
    """A session under construction: calls in any order, children with their recorded spawn and end times."""

    id: str
    agent: str
    calls: list[_Call] = field(default_factory=list)
    kids: list[tuple[float, float | None, _Node]] = field(default_factory=list)  # (spawn at, recorded end, node)

    def recorded_end(self) -> float:
        ends = [c.end for c in self.calls]
        ends += [end if end is not None else kid.recorded_end() for _, end, kid in self.kids]
        return max(ends, default=0.0)


def _build(
    node: _Node, start: float, scope: str, max_gap_s: float | None, cut: Callable[[float], float]
) -> TraceSession:
    """The frozen session of ``node``, whose spawn point (or, for a root, origin) is ``start``; ``cut(t)``: the idle
    time cut before recorded time ``t``."""
    calls = sorted(node.calls, key=lambda c: c.at)  # stable: calls at one time keep their file order
    placed: list[tuple[int, int, float, _Node, float]] = []
    for spawn, end, kid in node.kids:
        if not kid.calls and not kid.kids:
            continue  # a sub-agent that made no model call: nothing to send
        after = -1
        for i, call in enumerate(calls):
            if call.at <= spawn + _EPS:
                after = i
        kid_end = end if end is not None else kid.recorded_end()
        join = next((j for j in range(after + 1, len(calls)) if calls[j].at >= kid_end - _EPS), len(calls))
        placed.append((after, join, spawn, kid, kid_end))
    placed.sort(key=lambda p: (p[0], p[2]))
    children = tuple(
        TraceChild(after, join, _build(kid, calls[after].end if after >= 0 else start, scope, max_gap_s, cut))
        for after, join, _, kid, _ in placed
    )
    out: list[TraceCall] = []
    for k, call in enumerate(calls):
        anchor = calls[k - 1].end if k else start
        for _, join, _, _, kid_end in placed:
            if join == k:
                anchor = max(anchor, kid_end)
        gap = max(0.0, call.at - anchor)
        if max_gap_s is not None:
            gap = min(gap, max_gap_s)
        ids = call.hash_ids
        out.append(
            TraceCall(
                call.at,
                call.at - cut(call.at),
                call.input_tokens,
                call.output_tokens,
                ids,
                call.block_tokens if ids else 0,
                gap,
                call.duration,
                call.where,
            )
        )
    return TraceSession(node.id, node.agent, tuple(out), children, scope)


def _root(node: _Node, max_gap_s: float | None) -> TraceSession:
    return _build(node, 0.0, node.id, max_gap_s, _idle_cuts(node, max_gap_s))


def _idle_cuts(root: _Node, max_gap_s: float | None) -> Callable[[float], float]:
    """``t`` -> the recorded idle time cut before ``t``: every stretch of the root's clock (from its origin, 0) in
    which no call of the root or of any of its sub-agents is in flight, longer than ``max_gap_s``, is shortened to
    it. A call's replay offset is its start less the cut before it, so later calls move up by what was cut and
    calls in flight together stay together. No cap: nothing is cut."""
    if max_gap_s is None:
        return lambda _: 0.0
    spans = sorted((c.at, c.end) for n in _nodes(root) for c in n.calls)
    starts: list[float] = []  # where an idle stretch longer than the cap ended
    cuts: list[float] = []  # the idle time cut up to and including it
    busy_until, total = 0.0, 0.0
    for at, end in spans:
        if at - busy_until > max_gap_s:
            total += at - busy_until - max_gap_s
            starts.append(at)
            cuts.append(total)
        busy_until = max(busy_until, end)

    def cut(t: float) -> float:
        i = bisect.bisect_right(starts, t)
        return cuts[i - 1] if i else 0.0

    return cut


def _nodes(node: _Node) -> list[_Node]:
    """``node`` and every sub-agent under it."""
    out = [node]
    for _, _, kid in node.kids:
        out += _nodes(kid)
    return out


# --- errors and field checks, shared by the readers -----------------------------------------------------------


def _fail(file: str, line: int | None, where: str, message: str) -> SubpathIssues:
    place = f"{file}:{line}" if line is not None else file
    return SubpathIssues([(("path",), f"{place}: {where}: {message}" if where else f"{place}: {message}")])


def _whole(value: Any, low: int, file: str, line: int | None, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _fail(file, line, where, f"expected a whole number >= {low}, got {value!r}")
    return value


def _seconds(value: Any, file: str, line: int | None, where: str, *, optional: bool = False) -> float | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        expected = "seconds >= 0" + (" or null" if optional else "")
        raise _fail(file, line, where, f"expected {expected}, got {value!r}")
    return float(value)


def _hash_ids(value: Any, file: str, line: int | None, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in value):
        raise _fail(file, line, where, f"expected a list of whole numbers >= 0, got {_short(value)}")
    return tuple(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


_Doc = tuple[int | None, str, Any]  # (line, entry path prefix, one decoded document)


def _documents(file: str, data: bytes) -> list[_Doc]:
    """The JSON documents of a file: one object (line None), a list of them (prefix "[i]."), or one per line."""
    text = data.lstrip(b"\xef\xbb\xbf")
    lines = text.split(b"\n")
    first = next(i for i, line in enumerate(lines) if line.strip())
    try:
        whole = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        try:
            orjson.loads(lines[first])
        except orjson.JSONDecodeError:
            raise _fail(file, None, "", f"not JSON ({exc})") from None
        docs: list[_Doc] = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                docs.append((number, "", orjson.loads(line)))
            except orjson.JSONDecodeError as line_exc:
                raise _fail(file, number, "", f"not JSON ({line_exc})") from None
        return docs
    if isinstance(whole, list):
        return [(None, f"[{i}].", doc) for i, doc in enumerate(whole)]
    return [(None, "", whole)]
