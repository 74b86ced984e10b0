"""Write the agentic trace samples shipped in loadgen/examples/traces/ (one per format loadgen/traffic/agent_traces.py
reads), deterministically, so the tests and the docs read the same files. Small stand-ins written here, not excerpts
of the published corpora:

- weka-agent-sample.jsonl: three Weka traces, one per line as the SemiAnalysis corpora ship them (sub-agent call
  times absolute, block_size 64). ``fanout``: 5 calls, two sub-agents spawned after call 1 and joined before call 2,
  a 300 s user pause before call 4. ``linear``: 4 calls, the third without api_time (its gap is start to start).
  ``background``: 3 calls, a sub-agent the parent did not wait for (joined at the third call) and one spawned after
  the last call (joined at the session's end).
- otel-agent-sample.jsonl: two OTLP JSON traces, one per line as the Collector's file exporter writes them. ``trace
  1``: an ``invoke_agent`` coder with 3 chat calls and execute_tool spans between them, two sub-agents after the
  first call joined before the second; ``trace 2``: two chat calls under an HTTP span, no agent span.

Each call's hash ids extend its predecessor's (a growing context), the sub-agents share the parent's first two
blocks (the system prompt). Run: python scripts/make-agent-trace-samples.py (rewrites both files).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "loadgen" / "examples" / "traces"
BLOCK = 64


class _Ids:
    """Hash ids for one trace: a context that grows by fresh blocks."""

    def __init__(self, start: int) -> None:
        self.next = start

    def grow(self, ids: list[int], tokens: int) -> list[int]:
        full = tokens // BLOCK
        while len(ids) < full:
            ids.append(self.next)
            self.next += 1
        return list(ids[:full])


def _call(t: float, n_in: int, n_out: int, ids: list[int], api_time: float | None) -> dict[str, Any]:
    call: dict[str, Any] = {"t": round(t, 3), "type": "s", "model": "claude-opus-4-5", "in": n_in, "out": n_out}
    call["hash_ids"] = ids
    if api_time is not None:
        call["api_time"] = api_time
    call["stop"] = "tool_use"
    return call


def _subagent(t: float, agent_id: str, calls: list[dict[str, Any]], duration_ms: int | None) -> dict[str, Any]:
    return {
        "t": round(t, 3),
        "type": "subagent",
        "agent_id": agent_id,
        "subagent_type": "Explore",
        "duration_ms": duration_ms,
        "status": "completed" if duration_ms is not None else "async_launched",
        "models": ["claude-haiku-4-5"],
        "requests": calls,
    }


def _trace(trace_id: str, requests: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": trace_id,
        "models": ["claude-opus-4-5", "claude-haiku-4-5"],
        "block_size": BLOCK,
        "hash_id_scope": "local",
        "tool_tokens": 0,
        "system_tokens": 0,
        "requests": requests,
    }


def weka() -> list[dict[str, Any]]:
    traces = []
    # fanout: calls at 0, 6; sub-agents at 9 (ends 9+20.5) and 9.5 (ends 9.5+18); calls at 31, 40, 345 (a 300 s pause).
    ids = _Ids(1)
    ctx: list[int] = []
    main = [_call(0.0, 1000, 120, ids.grow(ctx, 1000), 4.0), _call(6.0, 1300, 200, ids.grow(ctx, 1300), 3.0)]
    subs = []
    for k, (spawn, dur) in enumerate(((9.0, 20.5), (9.5, 18.0))):
        sub_ids = ctx[:2]
        t = spawn + 0.5
        calls = []
        for n_in in (400, 700, 1000):
            calls.append(_call(t, n_in, 60, ids.grow(sub_ids, n_in), 2.0))
            t += 6.0
        subs.append(_subagent(spawn, f"a{k}", calls, int(dur * 1000)))
    later = [
        _call(31.0, 1800, 150, ids.grow(ctx, 1800), 5.0),
        _call(40.0, 2100, 90, ids.grow(ctx, 2100), 4.0),
        _call(345.0, 2400, 300, ids.grow(ctx, 2400), 6.0),
    ]
    traces.append(_trace("fanout", [*main, *subs, *later]))
    # linear: no sub-agents; the third call has no api_time.
    ids, ctx = _Ids(1), []
    linear = []
    for t, n_in, api in ((0.0, 600, 2.0), (5.0, 900, 2.5), (11.0, 1250, None), (20.0, 1500, 3.0)):
        linear.append(_call(t, n_in, 80, ids.grow(ctx, n_in), api))
    traces.append(_trace("linear", linear))
    # background: an async sub-agent after call 0 still running at call 1, joined at call 2; one after the last call.
    ids, ctx = _Ids(1), []
    first = _call(0.0, 800, 100, ids.grow(ctx, 800), 3.0)
    bg_ids = ctx[:2]
    bg = _subagent(3.5, "bg", [_call(4.0, 500, 50, ids.grow(bg_ids, 500), 2.0),
                               _call(9.0, 800, 50, ids.grow(bg_ids, 800), 2.0)], None)  # fmt: skip
    second = _call(6.0, 1100, 100, ids.grow(ctx, 1100), 3.0)
    third = _call(14.0, 1400, 100, ids.grow(ctx, 1400), 3.0)
    tail_ids = ctx[:2]
    tail = _subagent(17.5, "tail", [_call(18.0, 400, 40, ids.grow(tail_ids, 400), 1.5)], 3000)
    traces.append(_trace("background", [first, bg, second, third, tail]))
    return traces


_T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in ns


def _attrs(values: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for key, value in values.items():
        if isinstance(value, str):
            v: dict[str, Any] = {"stringValue": value}
        elif isinstance(value, list):
            v = {"arrayValue": {"values": [{"intValue": str(i)} for i in value]}}
        else:
            v = {"intValue": str(value)}
        out.append({"key": key, "value": v})
    return out


def _span(
    trace: str, span: str, parent: str, name: str, start: float, end: float, attrs: dict[str, Any]
) -> dict[str, Any]:
    return {
        "traceId": trace,
        "spanId": span,
        "parentSpanId": parent,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": str(_T0 + round(start * 1e9)),
        "endTimeUnixNano": str(_T0 + round(end * 1e9)),
        "attributes": _attrs(attrs),
        "status": {},
    }


def _chat(trace: str, span: str, parent: str, start: float, end: float, n_in: int, n_out: int, ids: list[int]):  # type: ignore[no-untyped-def]
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.input_tokens": n_in,
        "gen_ai.usage.output_tokens": n_out,
        "loadgen.prompt.hash_ids": ids,
        "loadgen.prompt.block_tokens": BLOCK,
    }
    return _span(trace, span, parent, "chat gpt-4o", start, end, attrs)


def _agent(trace: str, span: str, parent: str, name: str, start: float, end: float) -> dict[str, Any]:
    attrs = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name}
    return _span(trace, span, parent, f"invoke_agent {name}", start, end, attrs)


def _tool(trace: str, span: str, parent: str, start: float, end: float) -> dict[str, Any]:
    attrs = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "read_file"}
    return _span(trace, span, parent, "execute_tool read_file", start, end, attrs)


def _export(spans: list[dict[str, Any]]) -> dict[str, Any]:
    scope = {"scope": {"name": "sample-agent"}, "spans": spans}
    resource = {"attributes": _attrs({"service.name": "sample-agent"})}
    return {"resourceSpans": [{"resource": resource, "scopeSpans": [scope]}]}


def otel() -> list[dict[str, Any]]:
    t1 = "0af7651916cd43dd8448eb211c80319c"
    ids, ctx = _Ids(1), []
    spans = [_agent(t1, "a000000000000001", "", "coder", 0.0, 40.0)]
    spans.append(_chat(t1, "c000000000000001", "a000000000000001", 0.5, 4.5, 900, 100, ids.grow(ctx, 900)))
    spans.append(_tool(t1, "e000000000000001", "a000000000000001", 4.6, 5.0))
    for k, (start, end) in enumerate(((5.0, 17.0), (5.2, 20.0))):
        agent = f"b00000000000000{k + 1}"
        spans.append(_agent(t1, agent, "a000000000000001", "explorer", start, end))
        sub, t = ctx[:2], start + 0.3
        for j, n_in in enumerate((300, 600)):
            spans.append(_chat(t1, f"d0000000000000{k}{j}", agent, t, t + 2.0, n_in, 40, ids.grow(sub, n_in)))
            spans.append(_tool(t1, f"f0000000000000{k}{j}", agent, t + 2.1, t + 4.0))
            t += 5.0
    spans.append(_chat(t1, "c000000000000002", "a000000000000001", 21.0, 25.0, 1300, 150, ids.grow(ctx, 1300)))
    spans.append(_tool(t1, "e000000000000002", "a000000000000001", 25.1, 29.0))
    spans.append(_chat(t1, "c000000000000003", "a000000000000001", 30.0, 33.5, 1700, 200, ids.grow(ctx, 1700)))
    t2 = "4bf92f3577b34da6a3ce929d0e0e4736"
    ids, ctx = _Ids(1), []
    plain = [_span(t2, "9000000000000001", "", "POST /answer", 0.0, 12.0, {"http.request.method": "POST"})]
    plain.append(_chat(t2, "9000000000000002", "9000000000000001", 0.1, 3.1, 500, 60, ids.grow(ctx, 500)))
    plain.append(_chat(t2, "9000000000000003", "9000000000000001", 8.0, 11.0, 700, 80, ids.grow(ctx, 700)))
    return [_export(spans), _export(plain)]


def _write(name: str, docs: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(doc, separators=(",", ":")) + "\n" for doc in docs)
    (OUT / name).write_text(text, encoding="utf-8")


def main() -> None:
    _write("weka-agent-sample.jsonl", weka())
    _write("otel-agent-sample.jsonl", otel())


if __name__ == "__main__":
    main()
