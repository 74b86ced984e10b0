"""Tools and structured output (`traffic.mixes[].tools`): the config and its refusals, the seeded schemas and draw,
the body openai-chat sends, the Python read of tool-call deltas, what the aggregate and the report make of them, and
the simulator's tool-call replies."""

from __future__ import annotations

import textwrap
from typing import Any

import orjson
import pytest

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from loadgen.config.tools import Tools, ToolsPlan, body_fields, function_schemas
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import RequestRecord
from loadgen.measure.tool_calls import tool_call_times
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect
from loadgen.report import build_report, render_markdown
from loadgen.sim.framings import FRAMINGS
from loadgen.sim.framings.base import ApiError, SimRequest
from loadgen.sim.framings.tools import TOOL_CALL_SHARE, tool_request

from ..report_schema import checked

_VARIANT = "variants:\n  - {name: v, base_url: 'http://h:1', model: m}\n"


def _issues(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        parse_scenario(textwrap.dedent(text), "s.yaml")
    return {i.path: i.message for i in err.value.issues}


def test_tools_ride_on_a_mix() -> None:
    sc = parse_scenario(_VARIANT + "traffic: {mixes: [{name: chat, tools: {functions: 3, tool_choice: required}}]}\n")
    assert sc.traffic.mixes[0].tools == Tools(functions=3, tool_choice="required")
    assert parse_scenario(_VARIANT).traffic.mixes[0].tools is None


@pytest.mark.parametrize(
    ("tools", "path", "words"),
    [
        ("{share: 0.5}", "functions", "functions > 0, a response_format"),
        ("{functions: 2, tool_choice: tool_2}", "tool_choice", "a function's name (tool_0, tool_1)"),
        ("{response_format: json_object, tool_choice: required}", "tool_choice", "needs functions > 0"),
        ("{functions: 1, json_schema: {type: object}}", "json_schema", "response_format: json_schema only"),
        ("{functions: 1, share: 0}", "share", "greater than 0"),
        ("{functions: 1, parallel: true}", "parallel", ""),
    ],
)
def test_each_tools_mistake_names_its_field(tools: str, path: str, words: str) -> None:
    issues = _issues(_VARIANT + f"traffic: {{mixes: [{{name: chat, tools: {tools}}}]}}\n")
    full = f"traffic.mixes[0].tools.{path}"
    assert full in issues and words in issues[full], issues


def test_dialects_without_tools_refuse_them() -> None:
    tgi = "variants:\n  - {name: t, base_url: 'http://h:1', model: m, dialect: tgi}\n"
    issues = _issues(tgi + "traffic: {mixes: [{name: chat, tools: {functions: 1}}]}\n")
    assert "speaks tgi, whose requests carry no tools" in issues["traffic.mixes[0].tools"]
    sessions = "traffic: {mixes: [{name: chat, sessions: {turns: 2}, tools: {functions: 1}}]}\n"
    assert parse_scenario(_VARIANT + sessions).traffic.mixes[0].tools == Tools(functions=1)  # an agent's session


def test_cli_exits_2_naming_the_field(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    from loadgen.cli import main

    path = tmp_path / "s.yaml"
    path.write_text(
        "variants:\n  - {name: o, base_url: 'http://h:1', model: m, dialect: ollama-chat}\n"
        "traffic: {mixes: [{name: chat, tools: {response_format: json_object}}]}\n"
    )
    assert main(["validate", str(path)]) == 2
    assert "traffic.mixes[0].tools" in capsys.readouterr().err


def test_schemas_are_seeded_per_mix() -> None:
    tools = Tools(functions=4, parameters=(2, 5))
    a = function_schemas(tools, 7, "chat")
    assert a == function_schemas(tools, 7, "chat")
    assert a != function_schemas(tools, 8, "chat") and a != function_schemas(tools, 7, "rag")
    assert [f["function"]["name"] for f in a] == ["tool_0", "tool_1", "tool_2", "tool_3"]
    for f in a:
        params = f["function"]["parameters"]
        assert 2 <= len(params["properties"]) <= 5 and params["required"] == list(params["properties"])
    named = body_fields(Tools(functions=2, tool_choice="tool_1", response_format="json_schema"), 7, "chat")
    assert named["tool_choice"] == {"type": "function", "function": {"name": "tool_1"}}
    fmt = named["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"]["type"] == "object"
    given = {"type": "object", "properties": {"x": {"type": "integer"}}}
    fields = body_fields(Tools(response_format="json_schema", json_schema=given), 7, "chat")
    assert fields == {"response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": given}}}
    assert body_fields(Tools(response_format="json_object"), 7, "c") == {"response_format": {"type": "json_object"}}


def test_the_draw_is_the_requests_own() -> None:
    plan = ToolsPlan({"chat": Tools(share=0.3, functions=2)}, 7)
    drawn = [plan.draw("chat", 5, i, 0) is not None for i in range(2000)]
    assert drawn == [plan.draw("chat", 5, i, 0) is not None for i in range(2000)]  # a function of the identity
    assert 0.25 < sum(drawn) / len(drawn) < 0.35
    assert drawn != [plan.draw("chat", 6, i, 0) is not None for i in range(2000)]
    assert plan.draw("rag", 5, 0, 0) is None  # a mix without tools
    # A session's turns all draw as its first.
    assert [plan.draw("chat", 5, i, 1) for i in range(200)] == [plan.draw("chat", 5, i, 3) for i in range(200)]
    every = ToolsPlan({"chat": Tools(functions=2)}, 7)
    assert all(every.draw("chat", 0, i, 0) is not None for i in range(100))


def test_openai_chat_puts_them_in_the_body() -> None:
    class Spec:
        system_prompt, prompt, max_tokens = "", "hello there", 12

    fields = body_fields(Tools(functions=2, tool_choice="required"), 7, "chat")
    body = orjson.loads(get_dialect("openai-chat").build_body(Spec(), "m", False, {**fields, "temperature": 0}))
    assert body["tools"] == fields["tools"] and body["tool_choice"] == "required" and body["temperature"] == 0
    assert body["messages"] == [{"role": "user", "content": "hello there"}] and body["max_tokens"] == 12


def _sse(*objs: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in objs) + b"data: [DONE]\n\n"


def _delta(**d: Any) -> dict[str, Any]:
    return {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}


def _read(body: bytes, sent: float = 0.0) -> RequestRecord:
    rec = RequestRecord("r", "v", "chat", sent=sent, carried_tools=True)
    acc = StreamAccumulator(rec, get_dialect("openai-chat"))
    for i, line in enumerate(body.split(b"\n\n")[:-1]):
        acc.feed(1.0 + i, line + b"\n\n")
    return acc.finish(99.0)


def test_tool_call_deltas_are_marked_and_timed_apart() -> None:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "tool_0", "arguments": ""}}
    rec = _read(
        _sse(
            _delta(role="assistant", content=""),
            _delta(tool_calls=[call]),
            _delta(tool_calls=[{"index": 0, "function": {"arguments": '{"a": 1'}}]),
            _delta(tool_calls=[{"index": 0, "function": {"arguments": "}"}}]),
            _delta(content="ok"),
        )
    )
    assert list(rec.chunk_times) == [2.0, 3.0, 4.0, 5.0] and list(rec.tool_call_chunks or ()) == [0, 1, 2]
    assert tool_call_times(rec) == (2.0, 5.0, 3)
    assert rec.ttft == 2.0  # TTFT stays the first token of either kind
    pure = _read(
        _sse(_delta(tool_calls=[call]), {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    )
    assert tool_call_times(pure) == (1.0, None, 1) and pure.finish_reason == "tool_calls"
    text = _read(_sse(_delta(content="a"), _delta(content="b")))
    assert text.tool_call_chunks is None and tool_call_times(text) == (None, 1.0, 0)
    assert RequestRecord.from_json(orjson.loads(orjson.dumps(rec.to_json()))).tool_call_chunks == rec.tool_call_chunks


def test_the_aggregate_and_the_report_give_share_and_first_times() -> None:
    call = {"index": 0, "id": "c1", "type": "function", "function": {"name": "tool_0", "arguments": "{}"}}
    agg = Aggregate()
    for i in range(4):  # two tool calls, one content reply, and one request that carried no tools
        body = _sse(_delta(tool_calls=[call]), _delta(tool_calls=[call])) if i < 2 else _sse(_delta(content="x"))
        rec = _read(body, sent=0.5)
        rec.request_id, rec.carried_tools = f"r{i}", i < 3
        agg.add(rec, 1.0)
    sc = parse_scenario(_VARIANT + "traffic: {mixes: [{name: chat, tools: {functions: 1}}]}\n")
    report = checked(build_report(sc, agg, 10.0))
    x = report["variants"][0]["tool_calls"]
    assert (x["requests"], x["tool_calls"], x["tool_call_share"], x["tool_call_tokens"]) == (3, 2, 0.6667, 4)
    assert x["tool_call_tokens_mean"] == 2.0 and x["content_replies"] == 1
    assert x["ttft_tool_call_ms"]["count"] == 2 and x["ttft_tool_call_ms"]["p50"] == pytest.approx(500, rel=0.01)
    assert x["ttft_content_ms"]["count"] == 1 and list(x["mixes"]) == ["chat"]
    md = render_markdown(report)
    assert "## Tool calls and content" in md and "| v | 3 | 2 | 66.7 % | 2.0 | 500" in md
    plain = Aggregate()
    rec = _read(_sse(_delta(content="x")))
    rec.carried_tools = False
    plain.add(rec, 1.0)
    assert "tool_calls" not in checked(build_report(parse_scenario(_VARIANT), plain, 10.0))["variants"][0]


def _sim(body: dict[str, Any]) -> tuple[str, int, bool]:
    return tool_request(body, ["some", "prompt", "words"])


def test_the_simulator_calls_a_tool_when_told_and_for_a_share_on_auto() -> None:
    tools = body_fields(Tools(functions=3, parameters=(2, 2)), 7, "chat")["tools"]
    name, args, json_reply = _sim({"tools": tools, "tool_choice": "required"})
    types = [p["type"] for p in next(t for t in tools if t["function"]["name"] == name)["function"]["parameters"][
        "properties"
    ].values()]  # fmt: skip
    assert name in {"tool_0", "tool_1", "tool_2"} and args == 2 + sum(6 if t == "string" else 2 for t in types)
    assert not json_reply
    named = {"type": "function", "function": {"name": "tool_2"}}
    assert _sim({"tools": tools, "tool_choice": named})[0] == "tool_2"
    assert _sim({"tools": tools, "tool_choice": "none"}) == ("", 0, False)
    auto = [tool_request({"tools": tools}, ["p", str(i)])[0] != "" for i in range(1000)]
    assert abs(sum(auto) / 1000 - TOOL_CALL_SHARE) < 0.06
    assert _sim({"response_format": {"type": "json_object"}}) == ("", 0, True)
    for bad in (
        {"tools": [{"type": "function"}]},
        {"tools": tools, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
        {"tool_choice": "required"},
        {"response_format": {"type": "xml"}},
    ):
        with pytest.raises(ApiError):
            _sim(bad)


class _State:
    rid, created, arrival, vocab_offset, perturbed = "r1", 0, 0.0, 3, frozenset[int]()
    reasoning_tokens, prompt_tokens, cached_tokens = 0, 3, 0

    def __init__(self, req: SimRequest) -> None:
        self.req = req
        self.first_step: float | None = None


@pytest.mark.parametrize("fmt", [None, {"type": "json_object"}])
def test_the_simulator_streams_a_tool_call_or_json_content_that_parses(fmt: dict[str, Any] | None) -> None:
    framing = FRAMINGS["/v1/chat/completions"]
    tools = body_fields(Tools(functions=1), 7, "chat")["tools"]
    body: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "stream": True}
    body |= {"tools": tools, "tool_choice": "required"} if fmt is None else {"response_format": fmt}
    req = framing.parse(body)
    s = _State(req)
    n = req.max_tokens
    events = framing.tokens(s, 0, 2, False) + framing.tokens(s, 2, n - 2, True)
    rec = _read(b"".join(e for e, _ in events) + b"data: [DONE]\n\n")
    deltas = [orjson.loads(e[6:])["choices"][0]["delta"] for e, _ in events]
    if fmt is None:
        assert n < 50 and list(rec.tool_call_chunks or ()) == [0, 1]
        first = deltas[0]["tool_calls"][0]
        assert first["id"] == "call_r1" and first["function"]["name"] == "tool_0"
        args = "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas)
        assert rec.finish_reason == "tool_calls"
    else:
        assert n == 50 and rec.tool_call_chunks is None
        args = "".join(d["content"] for d in deltas)
    assert isinstance(orjson.loads(args), dict)
    whole = orjson.loads(framing.full(s, n))["choices"][0]
    text = whole["message"]["tool_calls"][0]["function"]["arguments"] if fmt is None else whole["message"]["content"]
    assert isinstance(orjson.loads(text), dict)


def test_a_kept_stream_keeps_its_tool_call_for_the_next_turn() -> None:
    call = {"index": 0, "id": "call_9", "type": "function", "function": {"name": "tool_1", "arguments": '{"a": '}}
    more = {"index": 0, "function": {"arguments": "1}"}}
    rec = RequestRecord("r", "v", "chat")
    acc = StreamAccumulator(rec, get_dialect("openai-chat"), keep_text=True)
    body = _sse(_delta(tool_calls=[call]), _delta(tool_calls=[more]))
    for i, line in enumerate(body.split(b"\n\n")[:-1]):
        acc.feed(1.0 + i, line + b"\n\n")
    acc.finish(9.0)
    assert rec.tool_call_reply == {"id": "call_9", "name": "tool_1", "arguments": '{"a": 1}'}
    assert rec.output_text == ""
    plain = _read(body)  # not kept: nothing to send back
    assert plain.tool_call_reply is None and plain.tool_call_chunks is not None


def test_an_agents_next_turn_sends_the_call_and_its_result() -> None:
    from loadgen.config.traffic import MixDef, Sessions
    from loadgen.traffic.sampler import RequestSampler
    from loadgen.traffic.sessions import Conversation

    mix = MixDef.model_validate({"buckets": [{"name": "b", "prompt_tokens": [20, 20]}], "output_tokens": [5, 5]})
    sampler = RequestSampler({"m": mix}, {"m": 1.0}, 7, sessions={"m": Sessions(turns=(3, 3), follow_up_tokens=(4, 4))})
    first = sampler.spec_at(0)
    talk = Conversation(sampler, first)
    call = {"id": "call_x", "name": "tool_0", "arguments": '{"a": 1}'}
    second = talk.reply("", 6, call)
    assert second is not None and second.messages is not None
    assistant, tool = second.messages[-2:]
    assert assistant == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "call_x", "type": "function", "function": {"name": "tool_0", "arguments": '{"a": 1}'}}],
    }
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_x" and len(tool["content"].split()) == 4
    assert second.prompt_tokens == first.prompt_tokens + 6 + 4  # the call's tokens go back too
    third = talk.reply("an answer", 2)  # a reply with content: the next user message, as ever
    assert third is not None and third.messages is not None
    assert third.messages[-2] == {"role": "assistant", "content": "an answer"} and third.messages[-1]["role"] == "user"
    body = orjson.loads(get_dialect("openai-chat").build_body(third, "m", False))
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "assistant", "user"]
    assert body["messages"][1]["tool_calls"][0]["id"] == "call_x"


def test_the_simulator_takes_a_tool_result_only_for_a_call_made_before_it() -> None:
    from loadgen.sim.framings.tools import tool_messages

    call = {"id": "call_1", "type": "function", "function": {"name": "tool_0", "arguments": '{"a": "b c"}'}}
    history: list[Any] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    assert tool_messages(history) == (['{"a":', '"b', 'c"}'], "call_1")
    assert tool_messages(history[:1]) == ([], "")
    with pytest.raises(ApiError, match="answers no tool call"):
        tool_messages([history[0], {"role": "tool", "tool_call_id": "call_2", "content": "x"}])
    framing = FRAMINGS["/v1/chat/completions"]
    req = framing.parse({"messages": history, "max_tokens": 5})
    assert req.tool_result == "call_1" and req.words == ["hi", "sunny", '{"a":', '"b', 'c"}']
