"""The simulator's `/v1/responses` framing (sim/framings/responses.py), read back by loadgen's own `openai-responses`
dialect: the request it accepts and refuses, the events of a reply (plain, reasoning, a tool call, JSON), its usage
as OpenAI sends it, the whole reply, and its faults' events. The route on a live simulator against the truth log:
tests/integration/test_responses_sim.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest

from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import dialect_for, get_dialect
from loadgen.sim.framings import FRAMINGS, ApiError, SimRequest

_ROUTE = FRAMINGS["/v1/responses"]


@dataclass
class _Stream:
    """What a framing reads of a request in flight (`StreamState`)."""

    req: SimRequest
    reasoning_tokens: int = 0
    rid: str = "r1"
    created: int = 1
    arrival: float = 0.0
    vocab_offset: int = 3
    perturbed: frozenset[int] = field(default_factory=frozenset)
    first_step: float | None = None
    cached: int = 0

    @property
    def prompt_tokens(self) -> int:
        return len(self.req.words)

    @property
    def cached_tokens(self) -> int:
        return self.cached


def _request(**fields: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "input": [{"type": "message", "role": "user", "content": "w1 w2 w3"}],
        "stream": True,
    } | fields


def _replay(s: _Stream, steps: list[int]) -> tuple[RequestRecord, list[bytes]]:
    """The stream's bytes, engine step by engine step (`steps`: tokens per step), read by the dialect."""
    writes = [_ROUTE.head(s)]
    done = 0
    for i, n in enumerate(steps):
        final = i == len(steps) - 1
        events = _ROUTE.tokens(s, done, n, final)
        assert sum(k for _, k in events) == n
        done += n
        writes.append(b"".join(b for b, _ in events) + (_ROUTE.end(s, done) if final else b""))
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, get_dialect("openai-responses"), keep_text=True)
    acc.on_sent(0.0)
    for t, data in enumerate(writes):
        acc.feed(float(t + 1), data)
    acc.finish(float(len(writes) + 1))
    return rec, writes


def test_a_reply_reads_back_token_for_token() -> None:
    req = _ROUTE.parse(_request(instructions="sys words", max_output_tokens=6, temperature=0, priority=2))
    assert req.words == ["sys", "words", "w1", "w2", "w3"] and req.max_tokens == 6 and req.stream
    assert req.greedy and req.priority == 2 and req.include_usage and not req.tool_call
    rec, _ = _replay(_Stream(req, cached=2), [1, 3, 2])
    assert rec.ok and rec.finish_reason == "length" and list(rec.chunk_times) == [2.0, 3.0, 4.0]
    # No per-event count: one token an event, the usage's 6 spread over the three at the end.
    assert list(rec.chunk_tokens) == [2, 2, 2] and rec.output_tokens == 6 and rec.prompt_tokens == 5
    assert rec.cached_prompt_tokens == 2 and rec.reasoning_tokens == 0
    assert rec.output_text == " to in is that for it"


def test_thinking_comes_first_in_a_reasoning_item() -> None:
    s = _Stream(_ROUTE.parse(_request(max_output_tokens=5)), reasoning_tokens=3)
    rec, writes = _replay(s, [2, 2, 1])
    assert rec.ok and rec.reasoning_chunks is not None and list(rec.reasoning_chunks) == [0, 1]
    assert rec.reasoning_tokens == 3 and rec.output_tokens == 5
    assert b"response.reasoning_text.done" in writes[2] and writes[2].index(b"reasoning_text.delta") < writes[2].index(
        b"output_text.delta"
    )
    only_thinking, _ = _replay(_Stream(_ROUTE.parse(_request(max_output_tokens=2)), reasoning_tokens=2), [2])
    assert only_thinking.ok and only_thinking.finish_reason == "length" and only_thinking.output_text is not None


def test_a_tool_call_and_its_result() -> None:
    tool = {
        "type": "function",
        "name": "get",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
    req = _ROUTE.parse(_request(max_output_tokens=50, tools=[tool], tool_choice={"type": "function", "name": "get"}))
    assert req.tool_call == "get" and req.max_tokens == 8  # braces and a string's 6 tokens
    rec, _ = _replay(_Stream(req), [3, 5])
    assert rec.ok and rec.finish_reason == "tool_calls" and rec.tool_call_chunks is not None
    assert rec.tool_call_reply is not None and rec.tool_call_reply["name"] == "get"
    assert orjson.loads(rec.tool_call_reply["arguments"]) == {"answer": " to in is that for it as with"}
    # The agent's next turn: the call and its result as input items; the call's arguments billed as prompt.
    call = {"type": "function_call", "call_id": "call_r1", "name": "get", "arguments": '{"answer": "x y"}'}
    follow = _ROUTE.parse(_request(input=[call, {"type": "function_call_output", "call_id": "call_r1", "output": "z"}]))
    assert follow.tool_result == "call_r1" and follow.words == ["z", '{"answer":', '"x', 'y"}']


def test_structured_output_is_a_json_object() -> None:
    fmt = {"type": "json_schema", "name": "reply", "schema": {"type": "object"}}
    req = _ROUTE.parse(_request(max_output_tokens=4, text={"format": fmt}))
    assert req.json_reply and not req.tool_call
    rec, _ = _replay(_Stream(req), [1, 3])
    assert rec.output_text is not None and orjson.loads(rec.output_text) == {"answer": " to in is that"}


def test_a_whole_reply() -> None:
    req = _ROUTE.parse(_request(stream=False, max_output_tokens=3))
    body = _ROUTE.full(_Stream(req, reasoning_tokens=1), 3)
    chunk, text = dialect_for("openai-responses", stream=False).parse_whole(body)
    assert chunk.finish_reason == "length" and chunk.cum_tokens == 3 and text == " in is"
    assert chunk.usage is not None and chunk.usage["completion_tokens_details"] == {"reasoning_tokens": 1}


def test_faults_read_as_a_failed_and_a_malformed_request() -> None:
    d = get_dialect("openai-responses")
    failed = d.parse(_ROUTE.error_event().split(b"data: ", 1)[1].strip())
    assert failed.error is not None and "simulated mid-stream failure" in failed.error and not failed.malformed
    s = _Stream(_ROUTE.parse(_request(max_output_tokens=4)))
    (event, _), *_ = _ROUTE.tokens(s, 1, 1, False)
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, d)
    acc.feed(1.0, _ROUTE.truncated(event))
    assert rec.error == ErrorKind.MALFORMED
    error = orjson.loads(_ROUTE.error_body(429, "slow down", "RateLimitError"))
    assert error == {"error": {"message": "slow down", "type": "RateLimitError", "param": None, "code": 429}}


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"input": []}, "'input' is required"),
        ({"input": 5}, "'input' is required"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}, "text content parts"),
        ({"input": [{"type": "reasoning"}]}, "each input item"),
        ({"input": [{"type": "function_call_output", "call_id": "c9", "output": "1"}]}, "answers no function_call"),
        ({"instructions": 3}, "'instructions' must be a string"),
        ({"max_output_tokens": 0}, "'max_output_tokens' must be a positive integer"),
        ({"max_output_tokens": True}, "'max_output_tokens' must be a positive integer"),
        ({"priority": "high"}, "'priority' must be an integer"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "{type: function, name, parameters}"),
        ({"tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function"}}, "'tool_choice'"),
        ({"tool_choice": "required"}, "'tool_choice' needs 'tools'"),
        ({"text": {"format": {"type": "json_schema", "name": "r"}}}, "'text.format.schema'"),
        ({"text": {"format": {"type": "xml"}}}, "'text.format.type'"),
        ({"stream": "yes"}, "'stream' must be a boolean"),
    ],
)
def test_bad_requests_are_refused_with_400(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ApiError, match=message) as info:
        _ROUTE.parse(_request(**fields))
    assert info.value.status == 400


def test_a_string_input_and_the_default_cap() -> None:
    req = _ROUTE.parse({"input": "one two", "store": False, "ignore_eos": True})
    assert req.words == ["one", "two"] and req.max_tokens == 16 and not req.stream and req.model == ""
