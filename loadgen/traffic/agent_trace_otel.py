"""OpenTelemetry spans following the GenAI semantic conventions, read into loadgen's neutral agent graph
(agent_graph.py; the readers: agent_traces.py).

Two shapes of file: OTLP JSON (``{"resourceSpans": [{"scopeSpans": [{"spans": [...]}]}]}``, one such object or one
per line as the OpenTelemetry Collector's file exporter writes them), and a flat export ``{"spans": [...]}`` with
snake_case span fields and an attribute map (inference-perf's test traces). Fields read from each span:

- ``traceId`` / ``trace_id``, ``spanId`` / ``span_id``, ``parentSpanId`` / ``parent_span_id`` (empty or absent: a
  root span); ``startTimeUnixNano`` / ``endTimeUnixNano`` (OTLP: nanoseconds, a number or a decimal string) or
  ``start_time`` / ``end_time`` (flat: ISO 8601, read as UTC without a zone);
- ``gen_ai.operation.name``: ``chat``, ``text_completion`` and ``generate_content`` spans are model calls (they need
  ``gen_ai.usage.input_tokens`` >= 1 and ``gen_ai.usage.output_tokens`` >= 0); ``invoke_agent`` spans are agents
  (``gen_ai.agent.name`` names them). Every other span (``execute_tool``, HTTP, framework spans) only links parents
  to children: the time a tool took is part of the gap before the next call;
- ``loadgen.prompt.hash_ids`` (int array) with ``loadgen.prompt.block_tokens``: loadgen's own optional extension
  for a call's prompt blocks, since the GenAI conventions record no prefix identity. Without it a call has none.

One root session per trace id. A model call belongs to its nearest ``invoke_agent`` ancestor; an ``invoke_agent``
span nested under another agent is that agent's sub-agent; a trace whose calls all sit under one top-level agent
is that agent's session. Everything else is ignored: messages, models, request parameters, events, status.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from loadgen.traffic.agent_graph import (
    TraceSession,
    _build,
    _Call,
    _documents,
    _fail,
    _hash_ids,
    _idle_cuts,
    _Node,
    _root,
    _short,
    _whole,
)

__all__ = ["parse_otel"]

_CALL_OPS = frozenset({"chat", "text_completion", "generate_content"})
_AGENT_OP = "invoke_agent"


class _Span:
    __slots__ = ("attrs", "end", "id", "line", "parent", "start", "trace", "where")

    def __init__(
        self,
        trace: str,
        id: str,
        parent: str,
        start: int,
        end: int,
        attrs: dict[str, Any],
        line: int | None,
        where: str,
    ) -> None:
        self.trace, self.id, self.parent, self.start, self.end = trace, id, parent, start, end
        self.attrs, self.line, self.where = attrs, line, where


def _any_value(value: Any) -> Any:
    """An OTLP AnyValue as a Python value (intValue arrives as a decimal string in OTLP JSON)."""
    if not isinstance(value, dict):
        return value
    if "stringValue" in value:
        return value["stringValue"]
    if "intValue" in value:
        raw = value["intValue"]
        try:
            return int(raw)
        except (TypeError, ValueError):
            return raw
    if "doubleValue" in value:
        return value["doubleValue"]
    if "boolValue" in value:
        return value["boolValue"]
    if "arrayValue" in value:
        return [_any_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    return None


def _nanos(value: Any, file: str, line: int | None, where: str, flat: bool) -> int:
    if flat and isinstance(value, str):
        try:
            t = datetime.fromisoformat(value)
        except ValueError:
            raise _fail(file, line, where, f"expected an ISO 8601 time, got {value!r}") from None
        t = t if t.tzinfo is not None else t.replace(tzinfo=UTC)
        return (t - datetime(1970, 1, 1, tzinfo=UTC)) // _MICRO * 1000
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    expected = "an ISO 8601 time" if flat else "nanoseconds since the epoch (a whole number or a decimal string)"
    raise _fail(file, line, where, f"expected {expected}, got {value!r}")


_MICRO = datetime(1970, 1, 1, 0, 0, 0, 1, tzinfo=UTC) - datetime(1970, 1, 1, tzinfo=UTC)


def _span(raw: Any, file: str, line: int | None, where: str, flat: bool) -> _Span:
    if not isinstance(raw, dict):
        raise _fail(file, line, where, f"expected a JSON object (a span), got {type(raw).__name__}")
    keys = (
        ("trace_id", "span_id", "parent_span_id", "start_time", "end_time")
        if flat
        else ("traceId", "spanId", "parentSpanId", "startTimeUnixNano", "endTimeUnixNano")
    )
    ids = []
    for key in keys[:2]:
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            raise _fail(file, line, f"{where}.{key}", f"expected a non-empty string id, got {value!r}")
        ids.append(value)
    parent = raw.get(keys[2]) or ""
    if not isinstance(parent, str):
        raise _fail(file, line, f"{where}.{keys[2]}", f"expected a span id or nothing, got {parent!r}")
    start = _nanos(raw.get(keys[3]), file, line, f"{where}.{keys[3]}", flat)
    end = _nanos(raw.get(keys[4]), file, line, f"{where}.{keys[4]}", flat)
    if end < start:
        raise _fail(file, line, f"{where}.{keys[4]}", "the span ends before it starts")
    attrs_raw = raw.get("attributes", {} if flat else [])
    if flat:
        if not isinstance(attrs_raw, dict):
            raise _fail(file, line, f"{where}.attributes", f"expected a map of attributes, got {_short(attrs_raw)}")
        attrs = attrs_raw
    else:
        if not isinstance(attrs_raw, list) or not all(isinstance(a, dict) and "key" in a for a in attrs_raw):
            raise _fail(
                file, line, f"{where}.attributes", f"expected a list of {{key, value}}, got {_short(attrs_raw)}"
            )
        attrs = {a["key"]: _any_value(a.get("value")) for a in attrs_raw}
    return _Span(ids[0], ids[1], parent, start, end, attrs, line, where)


def _spans(file: str, data: bytes) -> list[_Span]:
    out: list[_Span] = []
    for line, prefix, doc in _documents(file, data):
        if not isinstance(doc, dict):
            raise _fail(file, line, prefix.rstrip("."), f"expected a JSON object, got {type(doc).__name__}")
        if "resourceSpans" in doc:
            resources = doc["resourceSpans"]
            if not isinstance(resources, list):
                raise _fail(file, line, prefix + "resourceSpans", f"expected a list, got {_short(resources)}")
            for r, resource in enumerate(resources):
                scopes = resource.get("scopeSpans") if isinstance(resource, dict) else None
                if not isinstance(scopes, list):
                    raise _fail(file, line, f"{prefix}resourceSpans[{r}].scopeSpans", "expected a list of scopes")
                for s, scope in enumerate(scopes):
                    spans = scope.get("spans", []) if isinstance(scope, dict) else None
                    where = f"{prefix}resourceSpans[{r}].scopeSpans[{s}].spans"
                    if not isinstance(spans, list):
                        raise _fail(file, line, where, f"expected a list of spans, got {_short(spans)}")
                    out += [_span(raw, file, line, f"{where}[{k}]", False) for k, raw in enumerate(spans)]
        elif "spans" in doc:
            spans = doc["spans"]
            if not isinstance(spans, list):
                raise _fail(file, line, prefix + "spans", f"expected a list of spans, got {_short(spans)}")
            out += [_span(raw, file, line, f"{prefix}spans[{k}]", True) for k, raw in enumerate(spans)]
        else:
            raise _fail(file, line, prefix.rstrip("."), 'expected OTLP JSON ("resourceSpans") or {"spans": [...]}')
    return out


def _place(file: str, span: _Span) -> str:
    return f"{file}:{span.line}" if span.line is not None else file


def _call(file: str, span: _Span, origin: int) -> _Call:
    place = _place(file, span)
    fail_at = f"{span.where} (span {span.id})"
    n_in = _whole(span.attrs.get("gen_ai.usage.input_tokens"), 1, place, None, f"{fail_at}: gen_ai.usage.input_tokens")
    n_out = _whole(
        span.attrs.get("gen_ai.usage.output_tokens"), 0, place, None, f"{fail_at}: gen_ai.usage.output_tokens"
    )
    ids: tuple[int, ...] = ()
    block = 0
    if "loadgen.prompt.hash_ids" in span.attrs:
        ids = _hash_ids(span.attrs["loadgen.prompt.hash_ids"], place, None, f"{fail_at}: loadgen.prompt.hash_ids")
        block = _whole(
            span.attrs.get("loadgen.prompt.block_tokens"), 1, place, None, f"{fail_at}: loadgen.prompt.block_tokens"
        )
        if len(ids) > -(-n_in // block):
            raise _fail(
                place,
                None,
                f"{fail_at}: loadgen.prompt.hash_ids",
                f"{len(ids)} blocks of {block} tokens: more than the prompt's {n_in} tokens hold",
            )
    return _Call(
        (span.start - origin) / 1e9, (span.end - span.start) / 1e9, n_in, n_out, ids, block, f"{place}: {span.where}"
    )


def _trace_session(file: str, trace_id: str, spans: list[_Span], max_gap_s: float | None) -> TraceSession | None:
    by_id: dict[str, _Span] = {}
    for span in spans:
        if span.id in by_id:
            raise _fail(_place(file, span), None, f"{span.where}.spanId", f"span {span.id} appears twice in its trace")
        by_id[span.id] = span

    def op(span: _Span) -> Any:
        return span.attrs.get("gen_ai.operation.name")

    def owner(span: _Span) -> _Span | None:
        """The nearest invoke_agent ancestor of ``span``; checks the parent chain on the way."""
        seen = {span.id}
        cur = span
        while cur.parent:
            parent = by_id.get(cur.parent)
            if parent is None:
                raise _fail(
                    _place(file, cur),
                    None,
                    f"{cur.where}.parentSpanId",
                    f"no span {cur.parent} in trace {trace_id} (a partial export?)",
                )
            if parent.id in seen:
                raise _fail(_place(file, cur), None, f"{cur.where}.parentSpanId", "the parent chain loops")
            if cur.start < parent.start:
                raise _fail(
                    _place(file, cur),
                    None,
                    cur.where,
                    f"span {cur.id} starts before its parent {parent.id} (a child before its parent)",
                )
            if op(parent) == _AGENT_OP:
                return parent
            seen.add(parent.id)
            cur = parent
        return None

    calls = [s for s in spans if op(s) in _CALL_OPS]
    if not calls:
        return None
    agents = [s for s in spans if op(s) == _AGENT_OP]
    for span in spans:
        owner(span)  # every parent link is checked, whether or not it leads to a call
    origin = min(s.start for s in calls + agents)
    nodes: dict[str | None, _Node] = {None: _Node(trace_id, "")}
    for agent in agents:
        name = agent.attrs.get("gen_ai.agent.name", "")
        nodes[agent.id] = _Node(f"{trace_id}/{agent.id}", name if isinstance(name, str) else str(name))
    for span in calls:
        parent = owner(span)
        nodes[parent.id if parent else None].calls.append(_call(file, span, origin))
    for agent in agents:
        parent = owner(agent)
        spawn, end = (agent.start - origin) / 1e9, (agent.end - origin) / 1e9
        nodes[parent.id if parent else None].kids.append((spawn, end, nodes[agent.id]))
    root = nodes[None]
    live = [kid for _, _, kid in root.kids if kid.calls or kid.kids]
    if not root.calls and len(live) == 1:  # the whole trace is one top-level agent: that agent is the session
        top = live[0]
        root = _Node(trace_id, top.agent, top.calls, top.kids)
        start = next(s for s, _, kid in nodes[None].kids if kid is top)
        return _build(root, start, trace_id, max_gap_s, _idle_cuts(root, max_gap_s))
    return _root(root, max_gap_s)


def parse_otel(file: str, data: bytes, max_gap_s: float | None) -> list[TraceSession]:
    by_trace: dict[str, list[_Span]] = {}
    for span in _spans(file, data):
        by_trace.setdefault(span.trace, []).append(span)
    sessions = [s for t, spans in by_trace.items() if (s := _trace_session(file, t, spans, max_gap_s)) is not None]
    if not sessions:
        raise _fail(
            file,
            None,
            "",
            "no GenAI model call span (gen_ai.operation.name chat, text_completion or generate_content) in the file",
        )
    return sessions
