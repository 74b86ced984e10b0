"""Every generated token counts, whatever field carries it; why a stream ended is kept in OpenAI's words; a
payload that is not what the server should send is `malformed` because the parser said so, not because of how its
message reads; a 200 body that is not a stream says so."""

from __future__ import annotations

import orjson
import pytest

from loadgen.measure.records import ErrorKind, RequestRecord, TokenSource
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import Chunk, get_dialect


def _run(dialect: str, events: list[bytes], content_type: str = "text/event-stream") -> RequestRecord:
    """Event i arrives at t = 1 + i / 100 (one read each); the body ends 10 ms after the last."""
    d = get_dialect(dialect)
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, d)
    acc.on_sent(1.0)
    acc.on_head(content_type)
    for i, ev in enumerate(events):
        acc.feed(1.0 + i / 100, ev if d.framing == "ndjson" else b"data: " + ev + b"\n\n")
    return acc.finish(1.0 + len(events) / 100)


def _chat(delta: object, finish: str | None = None) -> bytes:
    return orjson.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


_CHAT_END = [b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}', b"[DONE]"]


def test_a_refusal_is_output_with_a_ttft() -> None:
    rec = _run(
        "openai-chat",
        [
            _chat({"role": "assistant", "content": None, "refusal": ""}),
            _chat({"content": None, "refusal": "I can't"}),
            _chat({"content": None, "refusal": " help with that."}),
            _chat({}, "stop"),
            *_CHAT_END,
        ],
    )
    assert rec.ok and rec.ttft == pytest.approx(0.01)
    assert list(rec.chunk_times) == [pytest.approx(1.01), pytest.approx(1.02)]
    assert rec.output_token_count == 3 and rec.finish_reason == "stop"


@pytest.mark.parametrize(
    "content",
    [
        [{"type": "thinking", "thinking": []}],  # Mistral's reasoning part, nothing in it yet
        [{"type": "thinking", "thinking": [{"type": "text", "text": "hm"}]}],
        [{"type": "text", "text": ""}],
    ],
)
def test_a_content_part_is_a_token_chunk(content: object) -> None:
    rec = _run("openai-chat", [_chat({"role": "assistant", "content": ""}), _chat({"content": content}), b"[DONE]"])
    assert rec.ok and list(rec.chunk_times) == [pytest.approx(1.01)] and list(rec.chunk_tokens) == [1]


def _triton(text: str, **extra: object) -> bytes:
    return orjson.dumps({"model_name": "ensemble", "model_version": "1", "text_output": text, **extra})


def test_triton_trtllm_responses_with_several_tokens_count_as_many() -> None:
    # return_log_probs: one log prob per token of the response (speculative decoding: 3, 1, 2).
    rec = _run(
        "triton",
        [
            _triton(" Machine learning is", output_log_probs=[-0.1, -0.2, -0.05], cum_log_probs=-0.35),
            _triton(" a", output_log_probs=[-0.3], cum_log_probs=-0.65),
            _triton(" field of", output_log_probs=[[-0.2, -0.1]], cum_log_probs=[-0.95]),
        ],
    )
    assert rec.ok and list(rec.chunk_tokens) == [3, 1, 2] and rec.token_source == TokenSource.SERVER
    # sequence_length where the model returns it: this response's output length in streaming mode.
    rec = _run("triton", [_triton(" a b", sequence_length=[2]), _triton(" c d e", sequence_length=3)])
    assert list(rec.chunk_tokens) == [2, 3] and rec.token_source == TokenSource.SERVER
    # Not asked for log probs, the ensemble still returns a placeholder of zeros: no count in it.
    zeros = {"output_log_probs": [0.0], "cum_log_probs": 0.0}
    rec = _run("triton", [_triton(" a", **zeros), _triton(" b", **zeros), _triton("", **zeros)])
    assert list(rec.chunk_tokens) == [1, 1] and rec.token_source == TokenSource.ONE_PER_CHUNK


@pytest.mark.parametrize(
    ("dialect", "last", "reason"),
    [
        ("tgi", {"token": {"id": 2, "text": "", "special": True}, "index": 2, "generated_text": "a",
                 "details": {"finish_reason": "eos_token", "generated_tokens": 2}}, "stop"),
        ("tgi", {"token": {"id": 3, "text": "b", "special": False}, "index": 2, "generated_text": "ab",
                 "details": {"finish_reason": "length", "generated_tokens": 2}}, "length"),
        ("tgi", {"token": {"id": 3, "text": "b", "special": False}, "index": 2, "generated_text": "ab",
                 "details": {"finish_reason": "stop_sequence", "generated_tokens": 2}}, "stop"),
        ("llamacpp", {"content": "", "stop": True, "stop_type": "limit", "tokens_predicted": 2}, "length"),
        ("llamacpp", {"content": "", "stop": True, "stop_type": "eos", "tokens_predicted": 2}, "stop"),
        ("llamacpp", {"content": "", "stop": True, "stop_type": "word", "tokens_predicted": 2}, "stop"),
        ("llamacpp", {"content": "", "stop": True, "stopped_limit": True, "stopped_eos": False}, "length"),
        ("llamacpp", {"content": "", "stop": True, "stopped_eos": True, "stopped_limit": False}, "stop"),
        ("ollama-chat", {"message": {"content": ""}, "done": True, "done_reason": "length", "eval_count": 2}, "length"),
        ("triton", {"text_output": "", "finish_reason": ["length"]}, "length"),
        ("openai-completions", {"choices": [{"text": "", "finish_reason": "length"}]}, "length"),
    ],
)  # fmt: skip
def test_finish_reason_in_openais_words(dialect: str, last: dict[str, object], reason: str) -> None:
    firsts: dict[str, dict[str, object]] = {
        "tgi": {"token": {"id": 1, "text": "a", "special": False}, "index": 1, "generated_text": None},
        "llamacpp": {"content": "a", "stop": False, "tokens_predicted": 1},
        "ollama-chat": {"message": {"content": "a"}, "done": False},
        "triton": {"text_output": "a"},
        "openai-completions": {"choices": [{"text": "a", "finish_reason": None}]},
    }
    first = firsts[dialect]
    end = [b"[DONE]"] if dialect.startswith("openai") else []
    nl = b"\n" if dialect.startswith("ollama") else b""
    rec = _run(dialect, [orjson.dumps(first) + nl, orjson.dumps(last) + nl, *end])
    assert rec.ok and rec.finish_reason == reason


@pytest.mark.parametrize("dialect", ["openai-chat", "tgi", "llamacpp", "triton", "ollama-chat"])
@pytest.mark.parametrize(
    ("payload", "malformed"),
    [
        (b"{not json", True),
        (b"[1, 2]", True),
        (b'"a string"', True),
        # A server's error message that happens to start with the word: still the server's error.
        (b'{"error": "malformed request: prompt too long"}', False),
        (b'{"error": {"message": "stream chunk is not what you think", "type": "x"}}', False),
    ],
)
def test_malformed_is_what_the_parser_found(dialect: str, payload: bytes, malformed: bool) -> None:
    chunk = get_dialect(dialect).parse(payload)
    assert isinstance(chunk, Chunk) and chunk.error is not None and chunk.malformed is malformed
    nl = b"\n" if dialect.startswith("ollama") else b""
    first = {
        "openai-chat": _chat({"content": "a"}),
        "tgi": b'{"token":{"id":1,"text":"a","special":false},"index":1,"generated_text":null}',
        "llamacpp": b'{"content":"a","stop":false}',
        "triton": _triton("a"),
        "ollama-chat": b'{"message":{"content":"a"},"done":false}',
    }[dialect]
    rec = _run(dialect, [first + nl, payload + nl])
    assert rec.error == (ErrorKind.MALFORMED if malformed else ErrorKind.SERVER_ERROR)
    assert rec.partial_bytes == payload  # what broke, for the post-mortem
    assert list(rec.chunk_times) == [pytest.approx(1.0)]  # the token before it is kept


def test_openai_choice_that_is_not_an_object_is_malformed() -> None:
    chunk = get_dialect("openai-chat").parse(b'{"choices": [5]}')
    assert chunk.malformed and chunk.error is not None and "choice" in chunk.error


# ---- a 200 that is not a stream ---------------------------------------------------------------------------


def _body(dialect: str, reads: list[bytes], content_type: str) -> RequestRecord:
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, get_dialect(dialect))
    acc.on_sent(1.0)
    acc.on_head(content_type)
    for i, data in enumerate(reads):
        if acc.finished:
            break
        acc.feed(1.1 + i / 10, data)
    return acc.finish(2.0)


_COMPLETION = orjson.dumps(
    {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Paris."}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
    }
)


@pytest.mark.parametrize(
    ("dialect", "reads", "content_type"),
    [
        ("openai-chat", [_COMPLETION], "application/json"),  # the server ignored stream: true
        ("openai-chat", [b"\n  " + _COMPLETION[:20], _COMPLETION[20:]], "application/json"),
        ("openai-chat", [b"<html><body>Welcome to nginx</body></html>"], "text/html"),
        ("tgi", [b'[{"generated_text": "Paris."}]'], "application/json"),
        ("llamacpp", [b'{"content": "Paris.", "stop": true}'], "application/json; charset=utf-8"),
        ("ollama-chat", [b"<!DOCTYPE html><title>Sign in</title>"], "text/html; charset=utf-8"),
        ("ollama-chat", [b'{"message":{"content":"x"},"done":true}'], "text/html"),  # a proxy's page, by its type
    ],
)
def test_a_200_that_is_not_a_stream(dialect: str, reads: list[bytes], content_type: str) -> None:
    rec = _body(dialect, reads, content_type)
    assert rec.error == ErrorKind.NOT_A_STREAM
    assert content_type.split(";")[0] in rec.error_detail
    first = reads[0] if reads[0].strip() else reads[0] + reads[1]
    assert rec.partial_bytes == first[:2048] and not rec.chunk_times
    assert rec.done == pytest.approx(1.1 + (0.1 if first is not reads[0] else 0.0))


def test_the_first_bytes_kept_are_at_most_2_kib() -> None:
    rec = _body("openai-chat", [b'{"x": "' + b"a" * 5000 + b'"}'], "application/json")
    assert rec.error == ErrorKind.NOT_A_STREAM and len(rec.partial_bytes) == 2048


def test_a_200_json_error_is_the_servers_error() -> None:
    rec = _body(
        "openai-chat", [b'{"error": {"message": "model is loading", "type": "unavailable"}}'], "application/json"
    )
    assert rec.error == ErrorKind.SERVER_ERROR and "model is loading" in rec.error_detail


@pytest.mark.parametrize(
    ("dialect", "body", "content_type"),
    [
        # The type is not what decides: a stream is a stream (some servers label SSE as JSON or plain text).
        ("openai-chat", b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n', "application/json"),
        ("openai-chat", b': ping\n\ndata: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]\n\n', ""),
        ("ollama-chat", b'{"message":{"content":"a"},"done":false}\n{"done":true}\n', "application/json"),
    ],
)
def test_streams_with_any_content_type_are_streams(dialect: str, body: bytes, content_type: str) -> None:
    rec = _body(dialect, [body], content_type)
    assert rec.ok and list(rec.chunk_times) == [pytest.approx(1.1)]
