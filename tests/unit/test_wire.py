"""loadgen.protocol._wire (the C half of the common read): whatever a TokenChunkCounter counts, it accounts exactly as
the Python path (`_Parser` → SSE → dialect → accumulator) does; whatever it is not sure of, it refuses and changes
nothing."""

from __future__ import annotations

import json
import select
import socket

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.client.connection import _Parser
from loadgen.measure.records import RequestRecord
from loadgen.protocol import _wire
from loadgen.protocol.accumulator import StreamAccumulator, fast_path_available
from loadgen.protocol.dialects import get_dialect

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(payload: bytes) -> bytes:
    ev = b"data: " + payload + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(ev), ev)


def _vllm(n: int, text: str = " tok", **extra: object) -> bytes:
    obj = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": None}],
        "usage": {"prompt_tokens": 12, "completion_tokens": n, "total_tokens": 12 + n},
    }
    obj.update(extra)
    return orjson.dumps(obj)


_ROLE = orjson.dumps(
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}], "usage": {"completion_tokens": 0}}
)
_OPENING = [_HEAD + _chunk(_ROLE), _chunk(_vllm(1)), _chunk(_vllm(2))]
_USAGE = b'{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9}}'
_CLOSING = [_chunk(_USAGE), _chunk(b"[DONE]"), b"0\r\n\r\n"]


def _record_state(rec: RequestRecord) -> tuple[object, ...]:
    return (
        list(rec.chunk_times),
        list(rec.chunk_tokens),
        rec.prompt_tokens,
        rec.output_tokens,
        rec.error,
        rec.error_detail,
        rec.token_source,
        rec.done,
        rec.server_timings,
        rec.finish_reason,
        rec.partial_bytes,
        rec.cached_prompt_tokens,
        None if rec.tool_call_chunks is None else list(rec.tool_call_chunks),
        None if rec.reasoning_chunks is None else list(rec.reasoning_chunks),
        rec.reasoning_tokens,
    )


def _run(
    reads: list[bytes], dialect: str, fast: bool, taken: list[int] | None = None
) -> tuple[tuple[object, ...], int]:
    """Feed `reads` (read i arrives at t = i) the way the reactor does (_wire.c `Drainer.drain`); returns the record
    and how many reads the C counter counted whole. A read it counted in part goes on to Python from where it
    stopped, with the same arrival time."""
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, get_dialect(dialect))
    parser = _Parser(acc)
    counter = acc.make_chunk_counter() if fast else None
    parser.chunk_counter = counter
    counted_in_c = 0
    for i, data in enumerate(reads):
        if counter is not None and counter.armed:
            used = counter.try_count(float(i), data)
            if used == len(data):
                counted_in_c += 1
                if taken is not None:
                    taken.append(i)
                continue
            data = data[used:]
        if parser.on_read(float(i), data):
            break
    if parser.message_complete:
        acc.finish(float(len(reads)))
    else:
        acc.fail(float(len(reads)), "stream_interrupted", "cut")
    return _record_state(rec), counted_in_c


def _parity(
    middle: list[bytes], dialect: str = "openai-chat", opening: list[bytes] = _OPENING, taken: list[int] | None = None
) -> int:
    reads = opening + middle + _CLOSING
    slow, _ = _run(reads, dialect, fast=False)
    fast, counted_in_c = _run(reads, dialect, fast=True, taken=taken)
    assert fast == slow
    return counted_in_c


def test_the_c_half_is_built() -> None:
    # CI builds it (gcc is on every machine of this kind); a missing build would silently cost a large share of a
    # worker's core (`python -m bench.hotpath` prints the Python and the C cost per chunk).
    assert fast_path_available()


def test_plain_token_chunks_are_counted_in_c_like_python() -> None:
    middle = [_chunk(_vllm(n)) for n in range(3, 9)]
    # and the opening's token chunks and the closing's usage chunk: all but the head, [DONE] alone and the terminator
    assert _parity(middle) == len(middle) + 3


def test_the_first_token_decides_where_counts_come_from() -> None:
    # Server counts from the first token on: exact, token_source "server".
    fast, _ = _run(_OPENING + _CLOSING, "openai-chat", fast=True)
    assert fast[6] == "server" and fast[1] == [1, 1]
    # Text before the count moved: counts are not trusted, one token per chunk (and the counter agrees).
    lagging = [
        _HEAD + _chunk(_ROLE),
        _chunk(b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":0}}'),
        _chunk(b'{"choices":[{"delta":{"content":"b"}}],"usage":{"completion_tokens":5}}'),
        *_CLOSING,
    ]
    slow, _ = _run(lagging, "openai-chat", fast=False)
    fast, counted_in_c = _run(lagging, "openai-chat", fast=True)
    # One token per chunk, then the final usage (9) spread over the two chunks at the end.
    assert fast == slow and counted_in_c == 3 and fast[6] == "usage_spread" and fast[1] == [4, 5]


def test_several_chunks_in_one_read_and_several_tokens_per_chunk() -> None:
    middle = [_chunk(_vllm(4)) + _chunk(_vllm(6)), _chunk(_vllm(9)) + _chunk(_vllm(9, "")) + _chunk(_vllm(10))]
    assert _parity(middle) == 5


@pytest.mark.parametrize(
    "payload",
    [
        _vllm(3, "é漢🙂"),
        _vllm(3, 'quote " back \\ slash / \n \t \u0000 \u00e9'),
        json.dumps({"choices": [{"delta": {"content": "\u00e9"}}], "usage": {"completion_tokens": 3}}).encode(),
        b'{ "choices" : [ { "delta" : { "content" : "x" } } , 5, "s", [1, {"a": []}] ] , '
        b'"usage" : { "completion_tokens" : 3 } }',
        b'{"choices":[{"delta":{"content":""},"finish_reason":null}],"usage":{"prompt_tokens":12,"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":"a"},"finish_reason":5}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":null,"refusal":"I can\'t"}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":null,"refusal":""}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":[{"type":"thinking","thinking":[]}]}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":[]}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":null}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"reasoning_content":""}}],"usage":{"completion_tokens":3}}',  # no thought
        b'{"choices":[{"delta":{"reasoning":null,"content":"a"}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"tool_calls":[]}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"tool_calls":null,"content":"a"}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":"a"}}],"choices":[{"delta":{"content":""}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":"a","content":null}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":3},"usage":null}',
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":3.0,"prompt_tokens":"12"}}',
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":2}}',  # the count did not move
        b'{"choices":[{"delta":{"content":"a"}}]}',  # no usage: one token
        b'{"choices":[{"delta":{"content":0}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":3},"x":[1e5,-0.5e-3,true,false,null,{}]}',
        b'{"object":"chat.completion.chunk","choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":3}}',
        # the final usage-only chunk: totals, no token
        b'{"choices":[],"usage":{"completion_tokens":3}}',
        b'{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":9,"prompt_tokens_details":null}}',
        b'{"choices":[{"delta":{"content":"a"}}],"choices":[],"usage":{"completion_tokens":3}}',
        b'{"choices":[]}',
        # why the stream ended: a plain string is copied to the record as the dialect reads it (the last one wins)
        b'{"choices":[{"delta":{"content":""},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":"a"},"finish_reason":"length"}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":"a"},"finish_reason":"stop","finish_reason":null}]}',
        b'{"choices":[{"delta":{"content":"a"},"finish_reason":null,"finish_reason":"\xc3\xa9t\xc3\xa9"}]}',
        b'{"choices":[{"delta":{"content":"a"},"finish_reason":""}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"finish_reason":"stop"}],"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":3}}',
    ],
)
def test_accepted_shapes_match_python(payload: bytes) -> None:
    assert _parity([_chunk(payload)]) == 4


@pytest.mark.parametrize(
    "payload",
    [
        b"[DONE]",  # alone in its read: Python sees the end (the counter takes it only with more bytes after it)
        b'{"choices":null,"usage":{"completion_tokens":3}}',
        b'{"usage":{"completion_tokens":3}}',
        b'{"choices":[],"usage":{"prompt_tokens":12,"prompt_tokens_details":{"cached_tokens":8}}}',
        b'{"choices":[],"usage":{"completion_tokens":3},"timings":{"predicted_n":3}}',
        b'{"choices":[{"delta":{"content":"a"},"finish_reason":"st\\u006fp"}]}',
        b'{"choices":[{"delta":{"content":"a"},"finish_reason":"\\n"}]}',
        b'{"choices":[5]}',
        b'{"choices":{"delta":{"content":"a"}}}',
        b'{"error":{"message":"boom"}}',
        b'{"error":null,"choices":[{"delta":{"content":"a"}}]}',
        b'{"object":"error","message":"boom","choices":[{"delta":{"content":"a"}}]}',
        b'{"choices":[{"delta":{"content":"a"}}],"timings":{"predicted_n":3}}',
        # a reasoning model's thoughts: Python marks the chunk (measure/reasoning.py)
        b'{"choices":[{"delta":{"reasoning_content":"think"}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"reasoning":"think","content":null}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"reasoning_content":"so","content":"a"}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"reasoning":"","reasoning":"x"}}],"usage":{"completion_tokens":3}}',
        # a tool call's pieces: Python marks the chunk (measure/tool_calls.py)
        b'{"choices":[{"delta":{"tool_calls":[{"index":0}]}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":null,"tool_calls":[{"index":0,"function":{"arguments":"{"}}]}}]}',
        b'{"choices":[{"delta":{"content":"a","tool_calls":[{"index":0}]}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"tool_calls":[],"tool_calls":[{}]}}],"usage":{"completion_tokens":3}}',
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":3,"completion_tokens_details":{}}}',
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":true}}',
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":-1}}',
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":[3]}}',
        b'{"choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1234567890123456789012}}',
        b'{"choices":[{"delta":{"cont\\u0065nt":"a"}}]}',
        b'{"choices":[{"delta":{"content":"\\ud83d\\ude42"}}]}',
        b'{"choices":[{"delta":{"content":"\\ud800"}}]}',
        b'{"choices":[{"delta":{"content":"\xed\xa0\x80"}}]}',
        b'{"choices":[{"delta":{"content":"\xc3"}}]}',
        b'{"choices":[{"delta":{"content":"\x01"}}]}',
        b'{"choices":[{"delta":{"content":0.0}}]}',
        b'{"choices":[{"delta":{"content":"a"}}],"x":1e400}',
        b'{"choices":[{"delta":{"content":"a"}}],"x":01}',
        b'{"choices":[{"delta":{"content":"a"}}],}',
        b'{"choices":[{"delta":{"content":"a"}}]} x',
        b'{"choices":[{"delta":{"content":"a"}}]',
        b'[{"choices":[{"delta":{"content":"a"}}]}]',
        b"not json",
        b"[" * 40 + b"]" * 40,
    ],
)
def test_refused_shapes_change_nothing_and_python_decides(payload: bytes) -> None:
    taken: list[int] = []
    _parity([_chunk(payload)], taken=taken)
    assert taken[:2] == [1, 2] and 3 not in taken  # the opening's token chunks were counted in C, not this read


@pytest.mark.parametrize(
    "read",
    [
        b"event: error\ndata: {}\n\n",
        b'data: {"choices":[{"delta":{"content":"a"}}]}\r\n\r\n',
        b'data: {"choices":[{"delta":{"content":"a"}}]}\ndata: more\n\n',
        b": keep-alive\n\n",
    ],
)
def test_other_sse_framings_go_to_python(read: bytes) -> None:
    taken: list[int] = []
    _parity([b"%x\r\n%s\r\n" % (len(read), read)], taken=taken)
    assert taken[:2] == [1, 2] and 3 not in taken


def test_chunk_framing_must_be_exact() -> None:
    good = _chunk(_vllm(3))
    assert _parity([good[:-1], good[-1:]]) == 3  # split: Python reassembles, the counter never sees half a chunk
    wrong_size = b"ff" + good[good.index(b"\r\n") :]
    slow, _ = _run(_OPENING + [wrong_size], "openai-chat", fast=False)
    fast, counted_in_c = _run(_OPENING + [wrong_size], "openai-chat", fast=True)
    assert fast == slow and counted_in_c == 2
    assert _parity([good + b"0\r\n\r\n"]) == 2  # the terminator with it: the end is Python's


def test_completions_dialect() -> None:
    text = [b'{"choices":[{"text":" a","index":0}],"usage":{"completion_tokens":%d}}' % n for n in (3, 4)]
    empty = b'{"choices":[{"text":"","finish_reason":"length"}],"usage":{"completion_tokens":5}}'
    # the finish chunk too (its finish reason is a plain string)
    assert _parity([_chunk(p) for p in [*text, empty]], "openai-completions") == 6


def test_one_token_per_chunk_when_the_server_sends_no_counts() -> None:
    plain = [b'{"choices":[{"delta":{"content":"w%d"}}]}' % i for i in range(5)]
    reads = [_HEAD + _chunk(plain[0])] + [_chunk(p) for p in plain[1:]] + [_chunk(b"[DONE]"), b"0\r\n\r\n"]
    slow, _ = _run(reads, "openai-chat", fast=False)
    fast, counted_in_c = _run(reads, "openai-chat", fast=True)
    assert fast == slow and counted_in_c == 4  # the first token came with the head: counted in C from that read
    assert fast[1] == [1] * 5


def test_an_unarmed_counter_counts_nothing_and_hands_its_state_back_once() -> None:
    rec = RequestRecord("r", "v", "m")
    counter = _wire.TokenChunkCounter(rec, True, "server")
    assert not counter.armed and not counter.try_count(1.0, _chunk(_vllm(1)))
    counter.arm(1, 1)
    assert counter.try_count(2.0, _chunk(_vllm(3)))
    assert (list(rec.chunk_times), list(rec.chunk_tokens), counter.counted, rec.output_tokens) == ([2.0], [2], 3, 3)
    assert not counter.try_count(3.0, _chunk(b"[DONE]"))  # refused: disarmed, so no later read overtakes it
    assert not counter.armed and not counter.try_count(4.0, _chunk(_vllm(4)))
    assert counter.disarm() == (3, 1, None)  # the state once,
    assert counter.disarm() is None  # then nothing new to hand back
    counter.arm(3, 1)
    assert counter.try_count(5.0, _chunk(_vllm(4)))
    assert counter.disarm() == (4, 1, None) and not counter.try_count(6.0, _chunk(_vllm(5)))
    # A read counted in part: its leading whole chunks, up to what the counter does not take; the rest is Python's.
    counter.arm(4, 1)
    head = _chunk(_vllm(5)) + _chunk(_USAGE)
    assert counter.try_count(7.0, head + b"0\r\n\r\n") == len(head) and not counter.armed
    assert counter.disarm() == (5, 1, None) and (rec.prompt_tokens, rec.output_tokens) == (12, 9)
    # The end marker with more after it: taken, the counter disarmed, and when it came handed back.
    counter.arm(5, 1)
    head = _chunk(_vllm(6, finish_reason="x")) + _chunk(b"[DONE]")
    assert counter.try_count(8.0, head + b"0\r\n\r\n") == len(head) and not counter.armed
    assert counter.disarm() == (6, 1, 8.0) and rec.finish_reason is None  # the top-level key is not the choice's


def test_other_dialects_and_ndjson_have_no_counter() -> None:
    for name in ("tgi", "llamacpp", "ollama-chat", "triton"):
        assert StreamAccumulator(RequestRecord("r", "v", "m"), get_dialect(name)).make_chunk_counter() is None


def test_pure_python_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADGEN_PURE_PYTHON", "1")
    assert not fast_path_available()  # read when a reactor starts: its streams then get no counter


# ---- properties ---------------------------------------------------------------------------------------------

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
_values = st.recursive(
    _scalars,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=4), kids, max_size=3),
    max_leaves=8,
)
_delta = st.dictionaries(
    st.sampled_from(["content", "reasoning_content", "reasoning", "tool_calls", "refusal", "role", "x"]),
    _values,
    max_size=4,
)
_choice = st.fixed_dictionaries(
    {}, optional={"delta": _delta | _values, "text": _values, "finish_reason": _values, "index": _values}
)
_usage = st.dictionaries(
    st.sampled_from(
        ["prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details", "completion_tokens_details"]
    ),
    _values | st.fixed_dictionaries({}, optional={"cached_tokens": _values, "reasoning_tokens": _values}),
    max_size=3,
)
_chunk_obj = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.lists(_choice, max_size=2) | _values,
        "usage": _usage | _values,
        "object": st.sampled_from(["chat.completion.chunk", "error"]) | _values,
        "model": _values,
    },
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_chunk_obj, min_size=1, max_size=4),
    st.sampled_from(["openai-chat", "openai-completions"]),
    st.booleans(),
)
def test_any_chunk_objects_agree_with_python(objs: list[dict[str, object]], dialect: str, ascii_only: bool) -> None:
    # The stdlib's encoder: big integers, \u escapes (ensure_ascii), and lone surrogates encoded as invalid UTF-8.
    payloads = [json.dumps(o, ensure_ascii=ascii_only).encode("utf-8", "surrogatepass") for o in objs]
    _parity([_chunk(p) for p in payloads], dialect)
    # Right after the head, where the first token still decides where counts come from.
    _parity([_chunk(p) for p in payloads], dialect, opening=_OPENING[:1])


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 400), st.binary(min_size=1, max_size=3))
def test_corrupted_payloads_agree_with_python(at: int, junk: bytes) -> None:
    payload = _vllm(3, "é x")
    at %= len(payload)
    _parity([_chunk(payload[:at] + junk + payload[at + len(junk) :])])
    _parity([_chunk(payload[:at] + junk + payload[at + len(junk) :])], opening=_OPENING[:1])


def test_the_first_body_read_is_pythons_so_a_body_that_is_not_a_stream_is_seen() -> None:
    # The head alone in its read: the first body read is offered to the counter (count_first), which takes only
    # whole `data:` chunks; anything else is Python's, which sees that this body is not a stream.
    json_head = _HEAD.replace(b"text/event-stream", b"application/json")
    body = b'{"object":"chat.completion","choices":[{"message":{"content":"Paris."}}]}'
    reads = [json_head, b"%x\r\n%s\r\n" % (len(body), body), b"0\r\n\r\n"]
    slow, _ = _run(reads, "openai-chat", fast=False)
    fast, counted_in_c = _run(reads, "openai-chat", fast=True)
    assert fast == slow and counted_in_c == 0 and fast[4] == "not_a_stream" and fast[10] == body
    # A stream: its first token read is counted in C from Python's hand (count_first), the later ones by the drain.
    stream = [_HEAD, _chunk(_ROLE) + _chunk(_vllm(1)), _chunk(_vllm(2)), _chunk(_vllm(3))]
    slow, _ = _run(stream + _CLOSING, "openai-chat", fast=False)
    fast, counted_in_c = _run(stream + _CLOSING, "openai-chat", fast=True)
    assert fast == slow and counted_in_c == 3 and fast[4] is None


def test_cached_prompt_tokens_in_a_token_chunk_go_to_python() -> None:
    details = {"cached_tokens": 8}
    payload = _vllm(3, usage={"prompt_tokens": 12, "completion_tokens": 3, "prompt_tokens_details": details})
    assert _parity([_chunk(payload)]) == 3  # the opening and the closing's usage: the read with the details is Python's
    usage = {"prompt_tokens": 12, "completion_tokens": 9, "prompt_tokens_details": {"cached_tokens": 8}}
    final = orjson.dumps({"choices": [], "usage": usage})
    reads = [*_OPENING, _chunk(final), _chunk(b"[DONE]"), b"0\r\n\r\n"]
    for fast in (False, True):
        rec_state, _ = _run(reads, "openai-chat", fast)
        assert rec_state[11] == 8


def test_reasoning_chunks_are_pythons_and_marked_the_same_either_way() -> None:
    # Thoughts, then the answer, then the final usage with the server's reasoning count: the thinking reads are
    # Python's, the answer's are counted in C, and the record says which chunks were thinking.
    def delta(n: int, **d: object) -> bytes:
        return _chunk(orjson.dumps({"choices": [{"delta": d}], "usage": {"completion_tokens": n}}))

    usage = {"prompt_tokens": 12, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 3}}
    reads = [
        _HEAD + _chunk(_ROLE),
        delta(1, reasoning_content="Let"),
        delta(3, reasoning_content=" me think"),
        delta(4, content="It"),
        delta(6, content=" is 4."),
        _chunk(orjson.dumps({"choices": [], "usage": usage})),
        _chunk(b"[DONE]"),
        b"0\r\n\r\n",
    ]
    slow, _ = _run(reads, "openai-chat", fast=False)
    fast, counted_in_c = _run(reads, "openai-chat", fast=True)
    assert fast == slow
    assert counted_in_c == 2  # the two answer reads
    assert fast[0] == [1.0, 2.0, 3.0, 4.0] and fast[1] == [1, 2, 1, 2]
    assert fast[-2:] == ([0, 1], 3)


def test_tool_call_chunks_are_pythons_and_marked_the_same_either_way() -> None:
    # A tool call's pieces (its name, then its arguments), then content: the call's reads are Python's, the
    # content's are counted in C, and the record says which chunks were the call's.
    def delta(n: int, **d: object) -> bytes:
        return _chunk(orjson.dumps({"choices": [{"delta": d}], "usage": {"completion_tokens": n}}))

    opening = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "tool_0", "arguments": ""}}
    reads = [
        _HEAD + _chunk(_ROLE),
        delta(1, tool_calls=[opening]),
        delta(3, tool_calls=[{"index": 0, "function": {"arguments": '{"city": "Pa'}}]),
        delta(4, tool_calls=[{"index": 0, "function": {"arguments": 'ris"}'}}]),
        delta(5, content="Done"),
        delta(7, content=" now."),
        *_CLOSING,
    ]
    slow, _ = _run(reads, "openai-chat", fast=False)
    fast, counted_in_c = _run(reads, "openai-chat", fast=True)
    assert fast == slow
    assert counted_in_c == 3  # the two content reads and the final usage
    assert fast[0] == [1.0, 2.0, 3.0, 4.0, 5.0] and fast[1] == [1, 2, 1, 1, 2]
    assert fast[12] == [0, 1, 2]


# Bytes the JSON string reader must look at, whichever of its paths meets them: eight at a time for plain ASCII,
# one at a time for the rest (_wire_json.c `plain8`, `str`). Each at every offset of strings from 0 to 24 bytes.
_STRING_BYTES = [
    b'"',
    b"\\\\",
    b"\\n",
    b'\\"',
    b"\\u00e9",
    b"\x01",
    b"\x1f",
    b" ",
    b"~",
    b"\x7f",
    "é".encode(),
    b"\xc3",
    b"\x80",
    b"\xff",
    "\U0001f642".encode(),
]


@pytest.mark.parametrize("special", _STRING_BYTES)
def test_every_byte_the_string_reader_checks_at_every_offset_agrees_with_python(special: bytes) -> None:
    reads = []
    for n in range(25):
        for at in range(n + 1):
            text = b"abcdefghijklmnopqrstuvwxyz"[:at] + special + b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: n - at]
            reads.append(_chunk(b'{"choices":[{"delta":{"content":"' + text + b'"}}],"model":"m' + text + b'"}'))
    _parity(reads)


def test_wake_runs_python_only_for_reads_left_to_it() -> None:
    # `Drainer.wake` is the reactor's event-loop callback: it drains the epoll set as `drain` does and calls
    # `on_reads` only with what is left for Python; a wake-up whose reads the counter took whole (or that found
    # nothing) calls nothing.
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, get_dialect("openai-chat"))
    parser = _Parser(acc)
    counter = acc.make_chunk_counter()
    parser.chunk_counter = counter
    a, b = socket.socketpair()
    ep = select.epoll()
    try:
        b.setblocking(False)
        ep.register(b.fileno(), select.EPOLLIN)
        drainer = _wire.Drainer()
        calls: list[list[tuple[int, float, bytes | int]]] = []
        counters = {b.fileno(): counter}
        assert drainer.wake(ep.fileno(), counters, calls.append) is None and calls == []  # nothing ready
        a.sendall(_OPENING[0])  # the head and the role chunk: Python's
        drainer.wake(ep.fileno(), counters, calls.append)
        assert len(calls) == 1 and [(fd, data) for fd, _, data in calls[0]] == [(b.fileno(), _OPENING[0])]
        assert not parser.on_read(calls[0][0][1], _OPENING[0]) and counter.armed
        for token_read in _OPENING[1:]:  # whole token chunks: counted in C, no call
            a.sendall(token_read)
            drainer.wake(ep.fileno(), counters, calls.append)
        assert len(calls) == 1 and counter.counted == 2 and drainer.reads_counted == 2
        a.sendall(_CLOSING[0])  # the usage chunk: counted too (the common end of a stream), then [DONE] is Python's
        a.sendall(_CLOSING[1] + _CLOSING[2])
        drainer.wake(ep.fileno(), counters, calls.append)
        assert len(calls) == 2 and calls[1][0][0] == b.fileno()
    finally:
        ep.close()
        a.close()
        b.close()
