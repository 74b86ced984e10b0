"""The C half of the read (loadgen.protocol._wire) on Messages API streams: the `text_delta` events it counts, with or
without their `event: content_block_delta` line, it accounts exactly as the Python path (SSE parser → dialect →
accumulator) does; every other event (thinking, tool input, usage, errors, the stream's opening and end) it refuses
and Python reads. The streams are shaped as llama.cpp's server writes them (tests/unit/streams/anthropic-*.txt)."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.measure.records import RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect

from .test_wire import _HEAD, _run

_DIALECT = "anthropic-messages"
_DELTA_EVENT = b"event: content_block_delta\n"


def _chunk(payload: bytes, event: bytes | None = _DELTA_EVENT) -> bytes:
    ev = (event or b"") + b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(ev), ev)


def _events(*pairs: tuple[str, dict[str, object]]) -> bytes:
    """Several named events in one HTTP chunk (llama.cpp writes a token's events together)."""
    ev = b"".join(b"event: %s\ndata: %s\n\n" % (name.encode(), orjson.dumps(obj)) for name, obj in pairs)
    return b"%x\r\n%s\r\n" % (len(ev), ev)


def _text(text: str = " tok") -> bytes:
    return orjson.dumps({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})


_START = {
    "type": "message_start",
    "message": {
        "id": "chatcmpl-1",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "m",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"cache_read_input_tokens": 4, "input_tokens": 8, "output_tokens": 0},
    },
}
_BLOCK = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
_FIRST = ("content_block_delta", orjson.loads(_text("Hi")))
_OPENING = [_HEAD + _events(("message_start", _START), ("content_block_start", _BLOCK), _FIRST), _chunk(_text())]
_END = {"type": "message_delta", "delta": {"stop_reason": "max_tokens", "stop_sequence": None}}
_CLOSING = [
    _events(
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ("message_delta", {**_END, "usage": {"output_tokens": 9}}),
        ("message_stop", {"type": "message_stop"}),
    ),
    b"0\r\n\r\n",
]


def _parity(middle: list[bytes], opening: list[bytes] = _OPENING) -> int:
    reads = opening + middle + _CLOSING
    slow, _ = _run(reads, _DIALECT, fast=False)
    fast, counted_in_c = _run(reads, _DIALECT, fast=True)
    assert fast == slow
    return counted_in_c


def test_text_deltas_are_counted_in_c_like_python() -> None:
    middle = [_chunk(_text(f" w{i}")) for i in range(6)]
    assert _parity(middle) == len(middle) + 1  # and the opening's second delta: all but the first read and the end
    slow, _ = _run(_OPENING + middle + _CLOSING, _DIALECT, fast=False)
    # One token per delta (no per-chunk counts), the server's total of 9 = 8 chunks + EOS: left as counted.
    assert slow[1] == [1] * 8 and slow[2:4] == (12, 9) and slow[6] == "one_per_chunk" and slow[9] == "length"
    assert slow[11] == 4  # cached prompt tokens: message_start's cache reads


def test_without_the_event_line_and_several_deltas_in_one_read() -> None:
    assert _parity([_chunk(_text(), None), _chunk(_text()) + _chunk(_text(" x"), None)]) == 3


@pytest.mark.parametrize(
    "payload",
    [
        _text("é漢🙂"),
        _text('quote " back \\ slash / \n \t \u0000 \u00e9'),
        _text(""),  # no token, counted (as nothing) in C
        json.dumps(
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "\u00e9"}}
        ).encode(),
        b'{ "type" : "content_block_delta" , "index" : 0 , "delta" : { "type" : "text_delta" , "text" : "a" } }',
        b'{"delta":{"text":"a","type":"text_delta"},"type":"content_block_delta"}',
        b'{"type":"ping","type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}',
        b'{"type":"content_block_delta","delta":5,"delta":{"type":"text_delta","text":"a"}}',
        b'{"type":"content_block_delta","delta":{"type":"x","type":"text_delta","text":5,"text":"a"}}',
        b'{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","extra":[1,{"b":null}]},"x":1e5}',
    ],
)
def test_accepted_shapes_match_python(payload: bytes) -> None:
    assert _parity([_chunk(payload)]) == 2


@pytest.mark.parametrize(
    "payload",
    [
        # thinking and tool input: Python marks the chunks (measure/reasoning.py, measure/tool_calls.py)
        orjson.dumps({"type": "content_block_delta", "delta": {"type": "thinking_delta", "thinking": "hm"}}),
        orjson.dumps({"type": "content_block_delta", "delta": {"type": "input_json_delta", "partial_json": "{"}}),
        orjson.dumps({"type": "content_block_delta", "delta": {"type": "signature_delta", "signature": "s"}}),
        b'{"type":"content_block_delta","delta":{"type":"text_delta","text":5}}',
        b'{"type":"content_block_delta","delta":{"type":"text_delta"}}',
        b'{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"},"delta":null}',
        b'{"type":"content_block_delta","delta":{"type":"text_delta","text":"a","text":[]}}',
        b'{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"},"type":"message_delta"}',
        b'{"type":"content_block_delt\\u0061","delta":{"type":"text_delta","text":"a"}}',
        b'{"type":"content_block_delta","delta":{"type":"text\\u005fdelta","text":"a"}}',
        b'{"type":"content_block_delta","delta":{"typ\\u0065":"text_delta","text":"a"}}',
        b'{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"},"error":{"message":"x"}}',
        b'{"type":"content_block_delta","delta":{"type":"text_delta","text":"\\ud800"}}',
        b'{"type":"content_block_delta","delta":{"type":"text_delta","text":"\xc3"}}',
        b'{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}',
        b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}',
        b'{"type":"ping"}',
        b'{"type":"message_stop"}',
        orjson.dumps({**_END, "usage": {"output_tokens": 9}}),
        b"not json",
    ],
)
def test_refused_shapes_change_nothing_and_python_decides(payload: bytes) -> None:
    assert _parity([_chunk(payload)]) == 1  # only the opening's second delta was counted in C


@pytest.mark.parametrize(
    "event",
    [b"event: error\n", b"event: ping\n", b"event:content_block_delta\n", b"event: content_block_delta \n", b": c\n"],
)
def test_other_event_lines_go_to_python(event: bytes) -> None:
    assert _parity([_chunk(_text(), event)]) == 1


def test_an_error_event_mid_stream_fails_the_request_on_both_paths() -> None:
    error = _chunk(b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}', b"event: error\n")
    reads = [*_OPENING, _chunk(_text()), error, b"0\r\n\r\n"]
    slow, _ = _run(reads, _DIALECT, fast=False)
    fast, counted = _run(reads, _DIALECT, fast=True)
    assert fast == slow and counted == 2
    assert slow[4] == "server_error" and slow[5] == "overloaded_error: Overloaded" and slow[1] == [1, 1, 1]


def test_the_counter_is_made_for_the_dialect() -> None:
    acc = StreamAccumulator(RequestRecord("r", "v", "m"), get_dialect(_DIALECT))
    assert acc.make_chunk_counter() is not None
    kept = StreamAccumulator(RequestRecord("r", "v", "m"), get_dialect(_DIALECT), keep_text=True)
    assert kept.make_chunk_counter() is None  # a session's stream keeps its text: Python's


# ---- properties ---------------------------------------------------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 2**70), st.floats(allow_nan=False), st.text(max_size=6))
_values = st.recursive(
    _scalars,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
    max_leaves=6,
)
_kinds = st.sampled_from(["text_delta", "thinking_delta", "input_json_delta", "signature_delta", "x"])
_delta = st.fixed_dictionaries(
    {}, optional={"type": _kinds | _values, "text": st.text(max_size=4) | _values, "thinking": _values}
)
_event = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(["content_block_delta", "message_delta", "ping", "error"]) | _values,
        "delta": _delta | _values,
        "index": _values,
        "usage": _values,
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_event, min_size=1, max_size=4), st.booleans(), st.booleans())
def test_any_events_agree_with_python(objs: list[dict[str, object]], ascii_only: bool, named: bool) -> None:
    payloads = [json.dumps(o, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") for o in objs]
    event = _DELTA_EVENT if named else None
    _parity([_chunk(p, event) for p in payloads])
    _parity([_chunk(p, event) for p in payloads], opening=_OPENING[:1])
