"""The agentic trace readers (loadgen/traffic/agent_traces.py): the shipped samples parse to the expected graph, the
Weka timestamp conventions agree, malformed input names file, entry and field, gaps are capped."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from loadgen.config.errors import SubpathIssues
from loadgen.traffic.agent_traces import TraceSession, read_agent_trace, read_otel, read_weka

TRACES = Path(__file__).resolve().parents[2] / "loadgen" / "examples" / "traces"
WEKA = TRACES / "weka-agent-sample.jsonl"
OTEL = TRACES / "otel-agent-sample.jsonl"


def _shape(s: TraceSession) -> Any:
    """Everything but the file positions, rounded: what two readings of one trace must agree on."""
    calls = [
        (round(c.at_s, 6), c.input_tokens, c.output_tokens, c.hash_ids, c.block_tokens, round(c.gap_before_s, 6))
        for c in s.calls
    ]
    kids = [(k.after_call, k.join_before, _shape(k.session)) for k in s.children]
    return (s.id, s.agent, s.hash_scope, calls, kids)


def _weka_docs() -> list[dict[str, Any]]:
    return [json.loads(line) for line in WEKA.read_text().splitlines()]


def _write_jsonl(path: Path, docs: list[Any]) -> str:
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return str(path)


def test_weka_sample_graph() -> None:
    fanout, linear, background = read_weka(str(WEKA))
    assert [s.id for s in (fanout, linear, background)] == ["fanout", "linear", "background"]
    assert len(fanout.calls) == 5 and len(linear.calls) == 4 and len(background.calls) == 3
    # Two sub-agents after call 1, both joined before call 2; three calls each.
    assert [(k.after_call, k.join_before, len(k.session.calls)) for k in fanout.children] == [(1, 2, 3), (1, 2, 3)]
    assert [k.session.id for k in fanout.children] == ["fanout/a0", "fanout/a1"]
    assert fanout.children[0].session.agent == "Explore"
    # Gaps: end to start (api_time), after the join from the later child's end (9 + 20.5 s), the 300 s pause as is.
    assert [round(c.gap_before_s, 3) for c in fanout.calls] == [0.0, 2.0, 1.5, 4.0, 301.0]
    assert [round(c.gap_before_s, 3) for c in fanout.children[0].session.calls] == [0.5, 4.0, 4.0]
    # A call without api_time has no end: the next gap runs from its start.
    assert linear.calls[2].duration_s is None and linear.calls[3].gap_before_s == pytest.approx(9.0)
    # Hash ids: each call extends its predecessor; sub-agents share the parent's first two blocks only.
    ids = [c.hash_ids for c in fanout.calls]
    assert all(b[: len(a)] == a for a, b in zip(ids, ids[1:], strict=False))
    assert [len(i) for i in ids] == [15, 20, 28, 32, 37] and fanout.calls[0].block_tokens == 64
    sub = fanout.children[0].session.calls[0].hash_ids
    assert sub[:2] == ids[0][:2] and sub[2] not in ids[-1]
    assert {s.hash_scope for s in fanout.walk()} == {"fanout"}
    # The async sub-agent still ran at call 1, so call 2 waits for it; one after the last call joins at the end.
    assert [(k.after_call, k.join_before) for k in background.children] == [(0, 2), (2, 3)]
    assert background.calls[2].gap_before_s == pytest.approx(3.0)  # from the sub-agent's last call end (11 s)


def test_otel_sample_graph() -> None:
    coder, plain = read_otel(str(OTEL))
    assert coder.agent == "coder" and coder.id == "0af7651916cd43dd8448eb211c80319c"
    assert len(coder.calls) == 3 and len(plain.calls) == 2 and plain.children == ()
    assert [(k.after_call, k.join_before, len(k.session.calls)) for k in coder.children] == [(0, 1, 2), (0, 1, 2)]
    assert {k.session.agent for k in coder.children} == {"explorer"}
    assert [round(c.gap_before_s, 3) for c in coder.calls] == [0.5, 1.0, 5.0]  # call 1 after the later child (20 s)
    assert [c.duration_s for c in coder.calls] == pytest.approx([4.0, 4.0, 3.5])
    assert coder.calls[1].hash_ids[: len(coder.calls[0].hash_ids)] == coder.calls[0].hash_ids
    assert plain.calls[0].at_s == 0.0 and plain.calls[1].gap_before_s == pytest.approx(4.9)
    assert plain.calls[0].where.endswith("spans[1]") and ":2:" in plain.calls[0].where


def test_dispatch_and_directory(tmp_path: Path) -> None:
    assert [_shape(s) for s in read_agent_trace(str(WEKA))] == [_shape(s) for s in read_weka(str(WEKA))]
    assert [_shape(s) for s in read_agent_trace(str(OTEL))] == [_shape(s) for s in read_otel(str(OTEL))]
    shutil.copy(WEKA, tmp_path / "a.jsonl")
    shutil.copy(OTEL, tmp_path / "b.jsonl")
    assert len(read_agent_trace(str(tmp_path))) == 5


def test_weka_file_per_trace_and_list(tmp_path: Path) -> None:
    docs = _weka_docs()
    (tmp_path / "one.json").write_text(json.dumps(docs[0], indent=2))
    (tmp_path / "all.json").write_text(json.dumps(docs))
    assert [_shape(s) for s in read_weka(str(tmp_path / "one.json"))] == [_shape(read_weka(str(WEKA))[0])]
    assert [_shape(s) for s in read_weka(str(tmp_path / "all.json"))] == [_shape(s) for s in read_weka(str(WEKA))]


def test_weka_timestamp_conventions_agree(tmp_path: Path) -> None:
    docs = _weka_docs()
    relative = copy.deepcopy(docs)
    for trace in relative:
        for entry in trace["requests"]:
            if entry["type"] == "subagent":
                for call in entry["requests"]:
                    call["t"] = round(call["t"] - entry["t"], 6)
    rel = _write_jsonl(tmp_path / "relative.jsonl", relative)
    expected = [_shape(s) for s in read_weka(str(WEKA))]
    assert [_shape(s) for s in read_weka(rel)] == expected  # auto: calls before their marker mean relative
    assert [_shape(s) for s in read_weka(rel, subagent_times="relative")] == expected
    assert [_shape(s) for s in read_weka(str(WEKA), subagent_times="absolute")] == expected
    with pytest.raises(SubpathIssues, match=r"requests\[2\]\.requests\[0\]\.t: .*a child before its parent"):
        read_weka(rel, subagent_times="absolute")


def test_gaps_are_capped() -> None:
    capped = read_weka(str(WEKA), max_gap_s=60.0)
    assert [round(c.gap_before_s, 3) for c in capped[0].calls] == [0.0, 2.0, 1.5, 4.0, 60.0]
    assert capped[0].calls[4].at_s == 345.0  # the recorded offset is never capped
    assert max(c.gap_before_s for s in read_otel(str(OTEL), max_gap_s=0.75) for x in s.walk() for c in x.calls) == 0.75
    with pytest.raises(ValueError, match="max_gap_s"):
        read_weka(str(WEKA), max_gap_s=-1.0)


def _weka_mutation(path: str, value: Any) -> Any:
    def mutate(docs: list[dict[str, Any]]) -> None:
        *keys, last = path.split(".")
        node: Any = docs
        for key in keys:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is _DELETE:
            del node[int(last) if last.isdigit() else last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return mutate


_DELETE = object()

WEKA_BAD = [
    ("0.requests.0.in", -5, r":1: requests\[0\]\.in: expected a whole number >= 1, got -5"),
    ("0.requests.0.out", "many", r":1: requests\[0\]\.out: expected a whole number >= 0, got 'many'"),
    ("0.requests.0.t", _DELETE, r":1: requests\[0\]\.t: missing"),
    ("0.requests.1.type", "x", r":1: requests\[1\]\.type: expected \"n\", \"s\" or \"subagent\", got 'x'"),
    ("1.requests.0.hash_ids", [1, -2], r":2: requests\[0\]\.hash_ids: expected a list of whole numbers >= 0"),
    ("1.requests.0.hash_ids", list(range(11)), r":2: requests\[0\]\.hash_ids: 11 blocks of 64 tokens is more"),
    ("1.requests.0.api_time", -1, r":2: requests\[0\]\.api_time: expected seconds >= 0 or null"),
    ("0.requests.2.duration_ms", "long", r":1: requests\[2\]\.duration_ms: expected milliseconds >= 0 or null"),
    ("0.requests.2.requests.1.in", None, r":1: requests\[2\]\.requests\[1\]\.in: expected a whole number >= 1"),
    ("0.requests.2.requests.0.t", 1.0, r":1: requests\[2\]\.requests\[0\]\.t: 1\.0 is before its sub-agent's spawn"),
    ("2.block_size", 0, r":3: block_size: expected a whole number >= 1, got 0"),
    ("2.id", _DELETE, r":3: id: missing"),
    ("1.id", "fanout", r":2: id: 'fanout' appears twice"),
    ("1.requests", [], r":2: requests: no model call"),
    ("1.hash_id_scope", "world", r":2: hash_id_scope: expected \"local\" or \"global\""),
]


@pytest.mark.parametrize(("path", "value", "message"), WEKA_BAD, ids=[b[0] for b in WEKA_BAD])
def test_weka_malformed(tmp_path: Path, path: str, value: Any, message: str) -> None:
    docs = _weka_docs()
    _weka_mutation(path, value)(docs)
    file = _write_jsonl(tmp_path / "bad.jsonl", docs)
    with pytest.raises(SubpathIssues, match="bad.jsonl" + message):
        read_weka(file, subagent_times="absolute")


def _otel_docs() -> list[dict[str, Any]]:
    return [json.loads(line) for line in OTEL.read_text().splitlines()]


def _span(docs: list[dict[str, Any]], trace: int, index: int) -> dict[str, Any]:
    span: dict[str, Any] = docs[trace]["resourceSpans"][0]["scopeSpans"][0]["spans"][index]
    return span


def _set_attr(span: dict[str, Any], key: str, value: Any) -> None:
    span["attributes"] = [a for a in span["attributes"] if a["key"] != key]
    if value is not _DELETE:
        span["attributes"].append({"key": key, "value": value})


SPANS = r"resourceSpans\[0\]\.scopeSpans\[0\]\.spans"
OTEL_BAD = [
    ("no input tokens", lambda d: _set_attr(_span(d, 0, 1), "gen_ai.usage.input_tokens", _DELETE),
     rf":1: {SPANS}\[1\] \(span c000000000000001\): gen_ai.usage.input_tokens: expected a whole number >= 1, got None"),
    ("bad output tokens", lambda d: _set_attr(_span(d, 1, 2), "gen_ai.usage.output_tokens", {"stringValue": "x"}),
     rf":2: {SPANS}\[2\] \(span 9000000000000003\): gen_ai.usage.output_tokens: expected a whole number >= 0"),
    ("bad hash ids", lambda d: _set_attr(_span(d, 0, 1), "loadgen.prompt.block_tokens", _DELETE),
     rf":1: {SPANS}\[1\] \(span c000000000000001\): loadgen.prompt.block_tokens: expected a whole number >= 1"),
    ("missing parent", lambda d: _span(d, 0, 1).update(parentSpanId="ffffffffffffffff"),
     rf":1: {SPANS}\[1\]\.parentSpanId: no span ffffffffffffffff in trace"),
    ("child before parent", lambda d: _span(d, 0, 3).update(startTimeUnixNano="1767225599000000000"),
     rf":1: {SPANS}\[3\]: span b000000000000001 starts before its parent a000000000000001"),
    ("end before start", lambda d: _span(d, 1, 1).update(endTimeUnixNano="1"),
     rf":2: {SPANS}\[1\]\.endTimeUnixNano: the span ends before it starts"),
    ("bad time", lambda d: _span(d, 1, 1).update(startTimeUnixNano="soon"),
     rf":2: {SPANS}\[1\]\.startTimeUnixNano: expected nanoseconds since the epoch"),
    ("no span id", lambda d: _span(d, 1, 0).pop("spanId"), rf":2: {SPANS}\[0\]\.spanId: expected a non-empty string"),
    ("duplicate span", lambda d: _span(d, 1, 2).update(spanId="9000000000000002"),
     rf":2: {SPANS}\[2\]\.spanId: span 9000000000000002 appears twice"),
    ("not otlp", lambda d: d[1].update(resourceSpans={}), r":2: resourceSpans: expected a list"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "mutate", "message"), OTEL_BAD, ids=[b[0] for b in OTEL_BAD])
def test_otel_malformed(tmp_path: Path, name: str, mutate: Any, message: str) -> None:
    docs = _otel_docs()
    mutate(docs)
    file = _write_jsonl(tmp_path / "bad.jsonl", docs)
    with pytest.raises(SubpathIssues, match="bad.jsonl" + message):
        read_otel(file)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"the trace is empty"),
        ('{"id": "x", "block_size": 64, "requests": [\n', r"not JSON"),
        ('{"id": "a", "block_size": 64, "requests": []}\n{oops\n', r":2: not JSON"),
        ("[1, 2]", r": \[0\]: expected a JSON object"),
        ('{"hello": 1}', r"not an agentic trace loadgen knows"),
    ],
)
def test_malformed_files(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "t.json"
    file.write_text(text)
    with pytest.raises(SubpathIssues, match=message):
        read_agent_trace(str(file)) if "hello" in text else read_weka(str(file))


def test_otel_flat_export(tmp_path: Path) -> None:
    spans = [
        {"trace_id": "t", "span_id": "1", "parent_span_id": None, "start_time": "2026-02-25T10:00:00",
         "end_time": "2026-02-25T10:00:02.5", "attributes": {"gen_ai.operation.name": "chat",
         "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 5}},
        {"trace_id": "t", "span_id": "2", "parent_span_id": None, "start_time": "2026-02-25T10:00:03",
         "end_time": "2026-02-25T10:00:05", "attributes": {"gen_ai.operation.name": "chat",
         "gen_ai.usage.input_tokens": 20, "gen_ai.usage.output_tokens": 5}},
    ]  # fmt: skip
    file = tmp_path / "flat.json"
    file.write_text(json.dumps({"trace_id": "t", "spans": spans}))
    (session,) = read_agent_trace(str(file))
    assert [(c.at_s, c.duration_s, c.gap_before_s, c.hash_ids) for c in session.calls] == [
        (0.0, 2.5, 0.0, ()),
        (3.0, 2.0, 0.5, ()),
    ]
