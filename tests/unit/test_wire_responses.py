"""The C half of the read (loadgen/protocol/_wire.c) on the Responses API's stream: whatever it counts it accounts
exactly as the Python path (SSE → `OpenAIResponses.parse` → accumulator) does, whatever it is not sure of it refuses.
Only `response.output_text.delta` events are counted in C (with or without their `event:` line); every other event
(the opening, reasoning and tool-call deltas, the terminal event with the usage, errors) is Python's."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.measure.records import RequestRecord
from loadgen.protocol import _wire
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect

from .test_wire import _HEAD, _run

_DELTA = "response.output_text.delta"


def _ev(payload: bytes, name: str | None = None) -> bytes:
    """One HTTP chunk holding one SSE event, with its `event:` line when `name` is given (as vLLM, llama.cpp and
    OpenAI send them)."""
    ev = (b"event: %s\n" % name.encode() if name else b"") + b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(ev), ev)


def _raw(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


def _named(obj: dict[str, object]) -> bytes:
    return _ev(orjson.dumps(obj), str(obj["type"]))


def _delta(text: str = " tok", **extra: object) -> bytes:
    return _named({"type": _DELTA, "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": text} | extra)


_RESPONSE = {"id": "resp_1", "object": "response", "status": "in_progress"}
_ITEM = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress", "content": []}
_OPENING = [
    _HEAD
    + _named({"type": "response.created", "response": _RESPONSE})
    + _named({"type": "response.in_progress", "response": _RESPONSE}),
    _named({"type": "response.output_item.added", "output_index": 0, "item": _ITEM})
    + _named({"type": "response.content_part.added", "item_id": "msg_1", "part": {"type": "output_text", "text": ""}})
    + _delta("Hello"),
    _delta(" there"),
]
_USAGE = {
    "input_tokens": 12,
    "output_tokens": 9,
    "total_tokens": 21,
    "input_tokens_details": {"cached_tokens": 4},
    "output_tokens_details": {"reasoning_tokens": 0},
}
_DONE_RESPONSE = {"id": "resp_1", "status": "completed", "output": [_ITEM], "usage": _USAGE}
_CLOSING = [
    _named({"type": "response.output_text.done", "item_id": "msg_1", "text": "..."})
    + _named({"type": "response.output_item.done", "output_index": 0, "item": _ITEM}),
    _named({"type": "response.completed", "response": _DONE_RESPONSE}),
    b"0\r\n\r\n",
]


def _parity(middle: list[bytes], opening: list[bytes] = _OPENING, closing: list[bytes] = _CLOSING) -> int:
    reads = opening + middle + closing
    slow, _ = _run(reads, "openai-responses", fast=False)
    fast, counted_in_c = _run(reads, "openai-responses", fast=True)
    assert fast == slow
    return counted_in_c


def test_answer_deltas_are_counted_in_c_like_python() -> None:
    middle = [_delta(f" w{i}") for i in range(6)]
    assert _parity(middle) == len(middle) + 1  # and the opening's last read; its first two are Python's
    fast, _ = _run(_OPENING + middle + _CLOSING, "openai-responses", fast=True)
    # One token per delta, the usage's 9 spread over the 9 deltas (none to spread), its counts and cache hit kept.
    assert fast[1] == [1] * 8 and fast[2:4] == (12, 9) and fast[9] == "stop" and fast[11] == 4


def test_several_events_in_one_read_and_deltas_without_their_event_line() -> None:
    bare = _ev(orjson.dumps({"type": _DELTA, "delta": " x"}))
    assert _parity([_delta() + _delta() + bare, bare, bare + _delta()]) == 4  # the opening's last read too


@pytest.mark.parametrize(
    "payload",
    [
        {"type": _DELTA, "delta": "é漢🙂"},
        {"type": _DELTA, "delta": 'quote " back \\ slash / \n \t \u0000'},
        {"type": _DELTA, "delta": ""},  # no token
        {"type": _DELTA, "delta": None},
        {"type": _DELTA},
        {"type": _DELTA, "delta": 0},
        {"type": _DELTA, "delta": [1]},
        {"type": _DELTA, "delta": "a", "sequence_number": 7, "logprobs": [], "obfuscation": "x"},
        {"delta": "a", "type": _DELTA},
        {"type": "response.output_text.done", "delta": "a", "type2": 1, "x": [1e5, -0.5e-3, True, None, {}]},
    ],
)
def test_accepted_shapes_match_python(payload: dict[str, object]) -> None:
    data = orjson.dumps(payload)
    assert _parity([_ev(data, _DELTA)]) in (1, 2)  # counted in C, unless it is no delta (then Python's)
    assert _parity([_ev(data)]) in (1, 2)


def test_duplicate_keys_are_read_as_orjson_reads_them() -> None:
    for raw in (
        b'{"type":"response.output_text.delta","delta":"a","delta":""}',
        b'{"type":"response.output_text.delta","delta":"","delta":"a"}',
        b'{"type":"response.created","type":"response.output_text.delta","delta":"a"}',
        b'{"type":"response.output_text.delta","type":"response.output_text.done","delta":"a"}',
    ):
        _parity([_ev(raw, _DELTA)])


@pytest.mark.parametrize(
    "read",
    [
        # not the answer's delta: thinking and tool-call pieces are marked by Python (measure/reasoning.py, tools)
        _named({"type": "response.reasoning_text.delta", "delta": "hmm"}),
        _named({"type": "response.reasoning_summary_text.delta", "delta": "so"}),
        _named({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"a'}),
        _named({"type": "response.refusal.delta", "delta": "no"}),
        # llama.cpp's timings_per_token count, errors and anything with a response object
        _delta("a", timings={"predicted_n": 3}),
        _delta("a", error=None),
        _delta("a", response={}),
        _named({"type": "error", "code": "server_error", "message": "boom"}),
        _ev(b'{"type":"response.output_text.delt\\u0061","delta":"a"}', _DELTA),
        _ev(b'{"t\\u0079pe":"response.output_text.delta","delta":"a"}', _DELTA),
        _ev(b'{"type":"response.output_text.delta","delta":0.5}', _DELTA),
        _ev(b'{"type":"response.output_text.delta","delta":"a"}', "error"),
        _ev(b'{"type":"response.output_text.delta","delta":"a"}', "response.output_text.done"),
        _raw(b'event:response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"a"}\n\n'),
        _raw(b'event: response.output_text.delta\r\ndata: {"type":"response.output_text.delta","delta":"a"}\n\n'),
        _raw(b'data: {"type":"response.output_text.delta","delta":"a"}\r\n\r\n'),
        _raw(b'data: {"type":"response.output_text.delta","delta":"a"}\ndata: {}\n\n'),
        _ev(b'{"type":"response.output_text.delta","delta":"a"}', _DELTA) + b"0\r\n\r\n",
        _ev(b"not json", _DELTA),
        _ev(b'{"type":"response.output_text.delta","delta":"a"', _DELTA),
    ],
)
def test_refused_reads_change_nothing_and_python_decides(read: bytes) -> None:
    assert _parity([read]) == 1  # only the opening's last read was counted in C


def test_reasoning_and_tool_call_deltas_are_marked_the_same_either_way() -> None:
    call = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "tool_0", "arguments": ""}
    reads = [
        _OPENING[0],
        _named({"type": "response.output_item.added", "item": {"type": "reasoning", "id": "rs_1"}})
        + _named({"type": "response.reasoning_text.delta", "item_id": "rs_1", "delta": "Let"}),
        _named({"type": "response.reasoning_text.delta", "item_id": "rs_1", "delta": " me"}),
        _OPENING[1],
        _delta(" it"),
        _named({"type": "response.output_item.added", "item": call})
        + _named({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"city": '}),
        _named({"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '"Paris"}'}),
        _named({"type": "response.completed", "response": _DONE_RESPONSE | {"output": [call]}}),
        b"0\r\n\r\n",
    ]
    slow, _ = _run(reads, "openai-responses", fast=False)
    fast, counted_in_c = _run(reads, "openai-responses", fast=True)
    assert fast == slow and counted_in_c == 1  # the one answer delta after Python's reads
    assert fast[12] == [4, 5] and fast[13] == [0, 1] and fast[9] == "tool_calls"


def test_a_counter_of_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="kind"):
        _wire.TokenChunkCounter(RequestRecord("r", "v", "m"), 7, "server")
    acc = StreamAccumulator(RequestRecord("r", "v", "m"), get_dialect("openai-responses"))
    assert acc.make_chunk_counter() is not None


# ---- properties ---------------------------------------------------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**70), st.floats(allow_nan=False), st.text(max_size=6))
_values = st.recursive(
    _scalars,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
    max_leaves=8,
)
_event = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from([_DELTA, "response.reasoning_text.delta", "response.completed", "error"]) | _values,
        "delta": _values,
        "item_id": _values,
        "timings": _values,
        "sequence_number": _values,
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_event, min_size=1, max_size=4), st.booleans(), st.booleans())
def test_any_events_agree_with_python(objs: list[dict[str, object]], ascii_only: bool, named: bool) -> None:
    payloads = [json.dumps(o, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") for o in objs]
    reads = [_ev(p, _DELTA if named else None) for p in payloads]
    _parity(reads)
    _parity(reads, opening=_OPENING[:1])  # right after the head, where the first token decides the counts


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 200), st.binary(min_size=1, max_size=3))
def test_corrupted_events_agree_with_python(at: int, junk: bytes) -> None:
    payload = orjson.dumps({"type": _DELTA, "item_id": "msg_1", "delta": "é x"})
    at %= len(payload)
    _parity([_ev(payload[:at] + junk + payload[at + len(junk) :], _DELTA)])
