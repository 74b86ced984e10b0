"""The `openai-responses` dialect (dialects/responses.py): its request body, each stream event it reads, the
terminal events (completed, incomplete, failed, error), whole replies, and what a session keeps of a reply (its
text, its tool call). Whole streams of real servers' shapes are in test_dialects_streams.py (streams/
openai-responses-*.txt); the C read path's parity in test_wire_responses.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import Variant, parse_scenario
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import dialect_for, get_dialect, output_length
from loadgen.protocol.dialects.responses import OpenAIResponses
from loadgen.protocol.output_text import call_reader, text_reader

from .test_dialects_streams import STREAMS

_D = get_dialect("openai-responses")


@dataclass
class Spec:
    prompt: str = "What is the capital of France?"
    system_prompt: str = ""
    max_tokens: int = 128
    messages: Any = None


def body(spec: Spec | None = None, extra: dict[str, Any] | None = None, stream: bool = True) -> dict[str, Any]:
    dialect = _D if stream else dialect_for("openai-responses", stream=False)
    obj = orjson.loads(dialect.build_body(spec or Spec(), "my-model", True, extra))
    assert isinstance(obj, dict)
    return obj


# ---- the request --------------------------------------------------------------------------------------------


def test_path_framing_and_flags() -> None:
    assert _D.path_for("m") == "/v1/responses" and _D.framing == "sse" and _D.accept == "text/event-stream"
    assert not _D.ends_at_eof and _D.enforces_length and _D.priority_in_body and _D.replies_whole
    assert _D.chat_template and _D.model_per_request and not _D.takes_images


def test_body_holds_input_items_instructions_and_the_cap() -> None:
    # continuous usage has nothing to ask for in this API: no stream_options either way.
    assert body() == {
        "model": "my-model",
        "input": [{"type": "message", "role": "user", "content": "What is the capital of France?"}],
        "max_output_tokens": 128,
        "stream": True,
        "store": False,
    }
    with_system = body(Spec(system_prompt="Be brief.", max_tokens=9))
    assert with_system["instructions"] == "Be brief." and with_system["max_output_tokens"] == 9
    assert [item["role"] for item in with_system["input"]] == ["user"]


def test_exact_output_sends_ignore_eos_only_and_priority_goes_in_the_body() -> None:
    exact = body(Spec(max_tokens=77), {"ignore_eos": True, "priority": -3})
    assert exact["ignore_eos"] is True and exact["priority"] == -3 and "min_tokens" not in exact
    assert output_length("openai-responses", {"ignore_eos": True}) == "enforced"
    v = Variant(name="v", model="m", base_url="http://127.0.0.1:8000", dialect="openai-responses")
    assert v.exact_output is True and v.extra_body == {"ignore_eos": True}
    hosted = Variant(name="v", model="m", base_url="https://api.openai.com", dialect="openai-responses")
    assert hosted.exact_output is False and hosted.max_tokens_field == "max_tokens"


def test_tools_and_response_format_go_in_the_responses_shapes() -> None:
    fn = {"name": "tool_0", "description": "d", "parameters": {"type": "object", "properties": {}}}
    schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    extra = {
        "tools": [{"type": "function", "function": fn}],
        "tool_choice": {"type": "function", "function": {"name": "tool_0"}},
        "response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}},
        "text": {"verbosity": "low"},
    }
    sent = body(extra=extra)
    assert sent["tools"] == [{"type": "function", **fn}]
    assert sent["tool_choice"] == {"type": "function", "name": "tool_0"}
    assert sent["text"] == {"verbosity": "low", "format": {"type": "json_schema", "name": "reply", "schema": schema}}
    assert "response_format" not in sent
    assert extra["tools"] == [{"type": "function", "function": fn}]  # the class's fields are not changed
    json_object = body(extra={"response_format": {"type": "json_object"}, "tool_choice": "required"})
    assert json_object["text"] == {"format": {"type": "json_object"}} and json_object["tool_choice"] == "required"
    # Already in the Responses API's shapes (a user's own extra_body): sent as given.
    native = {"tools": [{"type": "function", "name": "f", "parameters": {}}], "tool_choice": {"type": "function"}}
    assert {k: body(extra=native)[k] for k in native} == native


def test_an_agent_s_history_becomes_function_call_items() -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "tool_0", "arguments": '{"a": 1}'}}
    history = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": "Looking.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "42"},
        {"role": "assistant", "content": None, "tool_calls": [call | {"id": "call_2"}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "43"},
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": "Thanks."},
    ]
    sent = body(Spec(messages=tuple(history)))
    assert sent["instructions"] == "You are an agent."
    assert sent["input"] == [
        {"type": "message", "role": "user", "content": "Go."},
        {"type": "message", "role": "assistant", "content": "Looking."},
        {"type": "function_call", "call_id": "call_1", "name": "tool_0", "arguments": '{"a": 1}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "42"},
        {"type": "function_call", "call_id": "call_2", "name": "tool_0", "arguments": '{"a": 1}'},
        {"type": "function_call_output", "call_id": "call_2", "output": "43"},
        {"type": "message", "role": "assistant", "content": "Done."},
        {"type": "message", "role": "user", "content": "Thanks."},
    ]


def test_whole_replies_ask_for_one() -> None:
    whole = dialect_for("openai-responses", stream=False)
    assert isinstance(whole, OpenAIResponses) and whole.framing == "json" and whole.accept == "application/json"
    assert body(stream=False)["stream"] is False
    with pytest.raises(ValueError, match="max_completion_tokens"):
        dialect_for("openai-responses", "max_completion_tokens")


# ---- the stream -------------------------------------------------------------------------------------------------


def _event(kind: str, **fields: Any) -> bytes:
    return orjson.dumps({"type": kind, **fields})


@pytest.mark.parametrize(
    ("payload", "output", "reasoning", "tool"),
    [
        (_event("response.output_text.delta", delta="Hi"), True, False, False),
        (_event("response.output_text.delta", delta=""), False, False, False),  # nothing generated
        (_event("response.refusal.delta", delta="I can't"), True, False, False),
        (_event("response.reasoning_text.delta", delta="Let"), True, True, False),
        (_event("response.reasoning_summary_text.delta", delta="**Plan**"), True, True, False),
        (_event("response.function_call_arguments.delta", delta='{"a'), True, False, True),
    ],
)
def test_token_events(payload: bytes, output: bool, reasoning: bool, tool: bool) -> None:
    chunk = _D.parse(payload)
    assert (chunk.has_output, chunk.reasoning, chunk.tool_call) == (output, reasoning, tool)
    assert chunk.cum_tokens is None and chunk.usage is None and not chunk.done and chunk.error is None


def test_llama_cpp_s_timings_per_token_count_every_delta() -> None:
    chunk = _D.parse(_event("response.output_text.delta", delta="a", timings={"predicted_n": 4, "prompt_n": 9}))
    assert chunk.cum_tokens == 4 and chunk.server_timings == {"predicted_n": 4, "prompt_n": 9}
    assert _D.parse(_event("response.output_text.delta", delta="a", timings=[1])).server_timings is None


@pytest.mark.parametrize(
    "kind",
    [
        "response.created",
        "response.in_progress",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.reasoning_text.done",
        "response.output_text.annotation.added",
        "response.queued",
        "response.some_future_event",
    ],
)
def test_events_without_tokens_carry_nothing(kind: str) -> None:
    chunk = _D.parse(_event(kind, response={"status": "in_progress"}, delta="x"))
    assert not chunk.has_output and not chunk.done and chunk.error is None and chunk.usage is None


def test_a_function_call_opens_without_a_token() -> None:
    item = {"type": "function_call", "call_id": "call_1", "name": "tool_0", "arguments": ""}
    chunk = _D.parse(_event("response.output_item.added", item=item))
    assert chunk.tool_call and not chunk.has_output
    message = _D.parse(_event("response.output_item.added", item={"type": "message", "content": []}))
    assert not message.tool_call and not message.has_output


_USAGE = {
    "input_tokens": 20,
    "input_tokens_details": {"cached_tokens": 16},
    "output_tokens": 8,
    "output_tokens_details": {"reasoning_tokens": 3},
    "total_tokens": 28,
}


@pytest.mark.parametrize(
    ("kind", "response", "finish"),
    [
        ("response.completed", {"status": "completed", "output": [{"type": "message"}]}, "stop"),
        ("response.completed", {"status": "completed", "output": [{"type": "function_call"}]}, "tool_calls"),
        # OpenAI's own event, and vLLM's completed event with the status, for max_output_tokens alike.
        (
            "response.incomplete",
            {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}},
            "length",
        ),
        ("response.completed", {"status": "incomplete", "incomplete_details": None}, "length"),
        (
            "response.incomplete",
            {"status": "incomplete", "incomplete_details": {"reason": "content_filter"}},
            "content_filter",
        ),
    ],
)
def test_the_terminal_event_ends_the_stream_with_its_usage(kind: str, response: dict[str, Any], finish: str) -> None:
    chunk = _D.parse(_event(kind, response=response | {"usage": _USAGE}))
    assert chunk.done and chunk.finish_reason == finish and chunk.error is None and not chunk.has_output
    assert chunk.cum_tokens is None  # totals, not tokens this event carried
    assert chunk.usage == {
        "prompt_tokens": 20,
        "completion_tokens": 8,
        "total_tokens": 28,
        "prompt_tokens_details": {"cached_tokens": 16},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }


def test_llama_cpp_s_timings_beside_the_completed_response() -> None:
    chunk = _D.parse(_event("response.completed", response={"status": "completed"}, timings={"predicted_n": 3}))
    assert chunk.done and chunk.server_timings == {"predicted_n": 3} and chunk.usage is None


@pytest.mark.parametrize(
    ("payload", "message", "is_malformed"),
    [
        (
            _event(
                "response.failed", response={"status": "failed", "error": {"code": "server_error", "message": "boom"}}
            ),
            "server_error: boom",
            False,
        ),
        (_event("response.failed", response={"status": "failed", "error": None}), "no error given", False),
        (_event("response.completed", response={"status": "cancelled"}), "status 'cancelled'", False),
        (
            _event("error", code="rate_limit_exceeded", message="slow down", param=None),
            "rate_limit_exceeded: slow",
            False,
        ),
        (_event("error", code=None, message="boom"), "boom", False),
        (orjson.dumps({"error": {"message": "engine dead", "type": "InternalServerError"}}), "engine dead", False),
        (_event("response.completed"), "no response object", True),
        (b'{"delta": "a"}', "no type", True),
        (b'{"type": ["x"]}', "no type", True),
        (b"[1]", "not a JSON object", True),
        (b"{not json", "malformed JSON", True),
    ],
)
def test_failures_and_malformed_events(payload: bytes, message: str, is_malformed: bool) -> None:
    chunk = _D.parse(payload)
    assert chunk.error is not None and message in chunk.error and chunk.malformed == is_malformed


def _stream(name: str, keep_text: bool = False) -> RequestRecord:
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, _D, keep_text=keep_text)
    acc.on_sent(0.0)
    for i, block in enumerate((STREAMS / name).read_bytes().split(b"\n\n")):
        if block:
            acc.feed(0.1 + 0.01 * i, block + b"\n\n")
    acc.finish(1.0)
    return rec


def test_a_session_keeps_the_reply_s_text_and_its_tool_call() -> None:
    rec = _stream("openai-responses-llamacpp-timings.txt", keep_text=True)
    assert rec.output_text == "The café is called Caf" and rec.tool_call_reply is None
    call = _stream("openai-responses-vllm-tool-call.txt", keep_text=True)
    assert not call.output_text and call.tool_call_chunks is not None
    assert call.tool_call_reply == {"id": "call_9c1e", "name": "tool_0", "arguments": '{"city": "Paris", "unit": "C"}'}
    assert call.finish_reason == "tool_calls" and call.ok


def test_an_error_event_fails_the_request_as_server_error() -> None:
    rec = _stream("openai-responses-error-event.txt")
    assert rec.error == ErrorKind.SERVER_ERROR and not rec.ok and rec.error_detail.startswith("rate_limit_exceeded")


def test_text_and_call_readers() -> None:
    text = text_reader("openai-responses")
    assert text(_event("response.output_text.delta", delta="Hi")) == "Hi"
    assert text(_event("response.refusal.delta", delta="No")) == "No"
    assert text(_event("response.reasoning_text.delta", delta="hmm")) == ""
    assert text(_event("response.output_text.done", text="Hi")) == "" and text(b"junk") == ""
    calls = call_reader("openai-responses")
    item = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": ""}
    assert calls(_event("response.output_item.added", item=item)) == ("c1", "f", "")
    assert calls(_event("response.function_call_arguments.delta", delta='{"a')) == ("", "", '{"a')
    assert calls(_event("response.output_item.added", item={"type": "message"})) == ("", "", "")
    assert calls(b"[]") == ("", "", "")
    assert call_reader("openai-chat") is not calls


# ---- whole replies ----------------------------------------------------------------------------------------------


def test_whole_reply() -> None:
    whole = dialect_for("openai-responses", stream=False)
    reply = {
        "id": "resp_1",
        "object": "response",
        "status": "completed",
        "error": None,
        "output": [
            {"type": "reasoning", "summary": []},
            {
                "type": "message",
                "content": [{"type": "output_text", "text": "Hello"}, {"type": "output_text", "text": "!"}],
            },
        ],
        "usage": _USAGE,
    }
    chunk, text = whole.parse_whole(orjson.dumps(reply))
    assert (
        text == "Hello!" and chunk.done and chunk.has_output and chunk.cum_tokens == 8 and chunk.finish_reason == "stop"
    )
    assert not chunk.reasoning and not chunk.tool_call and chunk.usage is not None
    call, text = whole.parse_whole(orjson.dumps(reply | {"output": [{"type": "function_call", "name": "f"}]}))
    assert call.tool_call and call.finish_reason == "tool_calls" and text == ""
    failed, _ = whole.parse_whole(orjson.dumps(reply | {"status": "failed", "error": {"code": "x", "message": "y"}}))
    assert failed.error == "x: y"
    no_output, _ = whole.parse_whole(orjson.dumps({"status": "completed"}))
    assert no_output.malformed
    refused, _ = whole.parse_whole(b'{"error": {"message": "bad input", "type": "invalid_request_error"}}')
    assert refused.error == "invalid_request_error: bad input" and not refused.malformed
    assert whole.parse_whole(b'{"id": "x"}')[0].malformed


# ---- the scenario: what a variant of this dialect may ask, refused before any load (exit 2) ---------------------

_RESPONSES = "variants:\n  - {name: r, base_url: 'http://h:1', model: m, dialect: openai-responses%s}\n"


def _issues(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        parse_scenario(text, "s.yaml")
    return {i.path: i.message for i in err.value.issues}


def test_tools_and_a_response_format_are_carried() -> None:
    tools = "traffic: {mixes: [{name: chat, tools: {functions: 2, response_format: json_schema}}]}\n"
    assert parse_scenario(_RESPONSES % "" + tools).traffic.mixes[0].tools is not None


@pytest.mark.parametrize(
    ("fields", "extra", "path", "message"),
    [
        (", continuous_usage_stats: true", "", "variants[0].continuous_usage_stats", "no per-event usage"),
        (", max_tokens_field: max_completion_tokens", "", "variants[0].max_tokens_field", "only openai-chat"),
        (
            "",
            "traffic: {mixes: [{name: vis}], custom_mixes: {vis: {buckets: [{name: s, prompt_tokens: [20, 30]}], "
            "output_tokens: [5, 9], images: {share: 1, sizes: [[64, 64]]}}}}\n",
            "variants[0].dialect",
            "images",
        ),
    ],
)
def test_what_the_dialect_cannot_do_is_refused_naming_the_field(
    fields: str, extra: str, path: str, message: str
) -> None:
    issues = _issues(_RESPONSES % fields + extra)
    assert path in issues and message in issues[path], issues
