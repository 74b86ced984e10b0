"""The anthropic-messages dialect: its request (body, key header, version header), each stream event it reads, the
conversion of OpenAI-shaped history and tools, and what the scenario refuses for it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from loadgen.config.credentials import credential_values, redact
from loadgen.config.scenario import ConfigError, Variant, parse_scenario
from loadgen.config.tools import TOOL_DIALECTS, Tools, ToolsPlan, tools_by_mix
from loadgen.protocol.dialects import Chunk, describe_error_body, get_dialect, output_length
from loadgen.protocol.dialects.anthropic import anthropic_messages, anthropic_tools
from loadgen.protocol.output_text import call_reader, text_reader

D = get_dialect("anthropic-messages")


@dataclass
class Spec:
    prompt: str = "What is the capital of France?"
    system_prompt: str = ""
    max_tokens: int = 128
    messages: Any = None
    images: Any = None


def body(spec: Spec | None = None, extra: Any = None) -> dict[str, Any]:
    obj = orjson.loads(D.build_body(spec or Spec(), "claude-x", True, extra))
    assert isinstance(obj, dict)
    return obj


def parse(obj: dict[str, Any]) -> Chunk:
    return D.parse(orjson.dumps(obj))


# --- the request -----------------------------------------------------------------------------------------------


def test_path_framing_and_headers() -> None:
    assert D.path_for("claude-x") == "/v1/messages" and D.framing == "sse" and D.accept == "text/event-stream"
    assert (D.key_header, D.key_scheme) == ("x-api-key", "")
    assert D.headers == {"anthropic-version": "2023-06-01"}
    assert not D.enforces_length and not D.replies_whole and not D.priority_in_body
    assert D.model_per_request and D.chat_template and D.takes_images


def test_body_system_prompt_on_top_and_no_counts_asked() -> None:
    b = body(Spec(system_prompt="Be brief."))
    assert b == {
        "model": "claude-x",
        "max_tokens": 128,
        "messages": [{"role": "user", "content": "What is the capital of France?"}],
        "stream": True,
        "system": "Be brief.",
    }
    assert "system" not in body()  # no empty system


def test_exact_output_is_max_only_and_refused() -> None:
    assert output_length("anthropic-messages", {"ignore_eos": True}) == "max_only"
    v = Variant(name="a", base_url="http://h:1", model="m", dialect="anthropic-messages")
    assert v.exact_output is False and "ignore_eos" not in v.extra_body
    with pytest.raises(ValueError, match="cannot ask its server for an exact output length"):
        Variant(name="a", base_url="http://h:1", model="m", dialect="anthropic-messages", exact_output=True)


def test_the_key_goes_in_x_api_key_and_is_redacted() -> None:
    v = Variant(name="a", base_url="http://h:1", model="m", dialect="anthropic-messages", api_key_env="ANT_KEY")
    key = "sk-ant-canary-0123456789"
    headers = v.credential_headers({"ANT_KEY": key})
    assert headers == {"x-api-key": key}
    said = describe_error_body(
        orjson.dumps(
            {"type": "error", "error": {"type": "authentication_error", "message": f"invalid x-api-key {key}"}}
        )
    )
    assert said == f"authentication_error: invalid x-api-key {key}"
    assert key not in redact(said, credential_values(headers))
    # The chat dialects keep the bearer header.
    chat = Variant(name="c", base_url="http://h:1", model="m", api_key_env="ANT_KEY")
    assert chat.credential_headers({"ANT_KEY": key}) == {"Authorization": f"Bearer {key}"}


def test_continuous_usage_stats_is_refused() -> None:
    with pytest.raises(ValueError, match="anthropic-messages streams no per-chunk usage"):
        Variant(name="a", base_url="http://h:1", model="m", dialect="anthropic-messages", continuous_usage_stats=True)


def test_a_key_header_from_the_environment_that_api_key_env_already_sends_is_refused() -> None:
    with pytest.raises(ValueError, match="api_key_env sends the x-api-key header already"):
        Variant(
            name="a",
            base_url="http://h:1",
            model="m",
            dialect="anthropic-messages",
            api_key_env="K",
            headers_from_env={"x-api-key": "OTHER"},
        )


def test_history_in_anthropic_shapes() -> None:
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "look it up"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get", "arguments": '{"q": "x"}'}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "found it"},
        {"role": "user", "content": "and then?"},
        {"role": "assistant", "content": "cut", "tool_calls": [{"id": "c2", "function": {"arguments": '{"q'}}]},
    ]
    system, messages = anthropic_messages(history)
    assert system == "sys"
    assert messages == [
        {"role": "user", "content": "look it up"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "get", "input": {"q": "x"}}]},
        # The tool's result and the next user message: one user turn (the API wants the roles in turn).
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "c1", "content": "found it"},
                {"type": "text", "text": "and then?"},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "cut"}, {"type": "tool_use", "id": "c2", "name": "", "input": {}}],
        },
    ]
    assert body(Spec(messages=history))["system"] == "sys"


def test_images_as_image_blocks() -> None:
    spec = Spec(images=["data:image/png;base64,iVBORw0KGgo=", "https://example.com/cat.jpg"])
    (message,) = body(spec)["messages"]
    assert message["content"] == [
        {"type": "text", "text": spec.prompt},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
    ]


def test_a_mix_s_tools_in_anthropic_shapes() -> None:
    plan = ToolsPlan({"chat": Tools(functions=2, tool_choice="tool_1")}, seed=3)
    fields = plan.draw("chat", 0, 0, 0)
    assert fields is not None
    b = body(extra=fields)
    assert [t["name"] for t in b["tools"]] == ["tool_0", "tool_1"]
    assert b["tools"][0]["input_schema"]["type"] == "object" and b["tools"][0]["description"]
    assert b["tool_choice"] == {"type": "tool", "name": "tool_1"}
    for choice, sent in [("auto", {"type": "auto"}), ("required", {"type": "any"}), ("none", {"type": "none"})]:
        assert anthropic_tools({"tool_choice": choice})["tool_choice"] == sent
    mine = {"tools": [{"name": "own", "input_schema": {}}], "tool_choice": {"type": "any"}}
    assert anthropic_tools(mine) == mine  # already Anthropic's: left alone


def test_tools_yes_response_format_no() -> None:
    assert "anthropic-messages" in TOOL_DIALECTS
    doc = """
name: t
variants: [{name: a, base_url: "http://h:1", model: m, dialect: anthropic-messages}]
traffic: {mixes: [{name: chat, tools: %s}]}
"""
    scenario = parse_scenario(doc % "{functions: 2}", "s.yaml")
    assert tools_by_mix(scenario.traffic.mixes)["chat"].functions == 2
    with pytest.raises(ConfigError) as e:
        parse_scenario(doc % "{functions: 2, response_format: json_object}", "s.yaml")
    (issue,) = e.value.issues
    assert issue.path == "traffic.mixes[0].tools.response_format" and "no response_format" in issue.message


# --- the stream ------------------------------------------------------------------------------------------------


def _delta(kind: str, **fields: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": kind, **fields}}


def test_message_start_gives_the_whole_prompt_and_its_cached_part() -> None:
    usage = {"input_tokens": 7, "cache_read_input_tokens": 90, "cache_creation_input_tokens": 3, "output_tokens": 1}
    c = parse({"type": "message_start", "message": {"id": "msg_1", "usage": usage}})
    assert not c.has_output and c.cum_tokens is None and not c.done
    assert c.usage == {"prompt_tokens": 100, "prompt_tokens_details": {"cached_tokens": 90}}
    # llama.cpp's: no cache creation field; an older server's: only input_tokens.
    c = parse({"type": "message_start", "message": {"usage": {"input_tokens": 5, "cache_read_input_tokens": 0}}})
    assert c.usage == {"prompt_tokens": 5, "prompt_tokens_details": {"cached_tokens": 0}}
    assert parse({"type": "message_start", "message": {"usage": {"input_tokens": 5}}}).usage == {"prompt_tokens": 5}
    assert parse({"type": "message_start", "message": {}}).usage is None
    assert parse({"type": "message_start", "message": None}).malformed


@pytest.mark.parametrize(
    ("delta", "output", "reasoning", "tool"),
    [
        (_delta("text_delta", text="Hi"), True, False, False),
        (_delta("text_delta", text=""), False, False, False),
        (_delta("text_delta", text=5), False, False, False),
        (_delta("thinking_delta", thinking="hmm"), True, True, False),
        (_delta("input_json_delta", partial_json='{"q"'), True, False, True),
        (_delta("input_json_delta", partial_json=""), False, False, False),  # the API's opening empty piece
        (_delta("signature_delta", signature="abc"), False, False, False),
        (_delta("citations_delta", citation={}), False, False, False),
        (_delta("some_future_delta", text="x"), False, False, False),
        (_delta([], text="x"), False, False, False),  # a type that is no string (found by the parity property)
    ],
)
def test_content_block_deltas(delta: dict[str, Any], output: bool, reasoning: bool, tool: bool) -> None:
    c = parse(delta)
    assert (c.has_output, c.reasoning, c.tool_call) == (output, reasoning, tool)
    assert c.cum_tokens is None and c.tokens is None and c.usage is None and c.error is None


def test_block_starts_stops_pings_and_unknown_events_carry_no_token() -> None:
    tool = {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "f"}}
    c = parse(tool)
    assert c.tool_call and not c.has_output  # the call's id and name, for a session; no token
    assert not parse(
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    ).has_output
    opened = parse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "Hi"}})
    assert opened.has_output and not opened.reasoning
    for obj in ({"type": "content_block_stop", "index": 0}, {"type": "ping"}, {"type": "brand_new_event", "x": 1}):
        c = parse(obj)
        assert not c.has_output and not c.done and c.error is None and c.usage is None
    assert parse({"index": 0}).malformed  # no type at all
    assert parse({"type": "content_block_delta", "delta": "x"}).malformed


@pytest.mark.parametrize(
    ("reason", "finish"),
    [("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "tool_calls"),
     ("refusal", "refusal"), (None, None)],
)  # fmt: skip
def test_message_delta_gives_the_finish_and_the_server_s_output_count(reason: str | None, finish: str | None) -> None:
    c = parse({"type": "message_delta", "delta": {"stop_reason": reason}, "usage": {"output_tokens": 42}})
    assert c.finish_reason == finish and c.usage == {"completion_tokens": 42}
    assert c.cum_tokens is None and not c.has_output and not c.done
    # Newer servers repeat the (cumulative) input counts there.
    usage = {"input_tokens": 4, "cache_read_input_tokens": 6, "output_tokens": 9}
    c = parse({"type": "message_delta", "delta": {}, "usage": usage})
    assert c.usage == {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 6}, "completion_tokens": 9}


def test_message_stop_ends_the_stream() -> None:
    assert parse({"type": "message_stop"}).done


def test_error_event_and_error_body() -> None:
    err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    c = parse(err)
    assert c.error == "overloaded_error: Overloaded" and not c.malformed
    assert describe_error_body(orjson.dumps(err)) == "overloaded_error: Overloaded"
    assert parse({"type": "error"}).error  # an error without details is still one
    for bad in (b"{not json", b"[1]"):
        assert D.parse(bad).malformed


def test_text_and_tool_call_readers() -> None:
    text = text_reader("anthropic-messages")
    assert text(orjson.dumps(_delta("text_delta", text="Hi"))) == "Hi"
    assert text(orjson.dumps(_delta("thinking_delta", thinking="x"))) == ""
    assert text(orjson.dumps({"type": "ping"})) == "" and text(b"nope") == ""
    call = call_reader("anthropic-messages")
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "f"}}
    assert call(orjson.dumps(start)) == ("t1", "f", "")
    assert call(orjson.dumps(_delta("input_json_delta", partial_json='{"a'))) == ("", "", '{"a')
    assert call(orjson.dumps(_delta("text_delta", text="x"))) == ("", "", "")
