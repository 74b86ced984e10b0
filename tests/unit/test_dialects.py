"""Dialects: request paths and bodies, error bodies of non-200 responses, robustness of parsing, and the
token-counting rules of the stream accumulator that the dialects rely on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from loadgen.config.scenario import Variant, scenario_json_schema
from loadgen.measure.records import RequestRecord, TokenSource
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import (
    DIALECT_NAMES,
    Chunk,
    describe_error_body,
    dialect_for,
    get_dialect,
    output_length,
)
from loadgen.registry import UnknownNameError


@dataclass
class Spec:
    prompt: str = "What is the capital of France?"
    system_prompt: str = ""
    max_tokens: int = 128


def body(dialect: str, spec: Spec | None = None, continuous: bool = False, extra: Any = None) -> dict[str, Any]:
    raw = get_dialect(dialect).build_body(spec or Spec(), "my-model", continuous, extra)
    obj = orjson.loads(raw)
    assert isinstance(obj, dict)
    return obj


# --- paths ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "path", "framing", "accept"),
    [
        ("openai-chat", "/v1/chat/completions", "sse", "text/event-stream"),
        ("openai-completions", "/v1/completions", "sse", "text/event-stream"),
        ("tgi", "/generate_stream", "sse", "text/event-stream"),
        ("triton", "/v2/models/my-model/generate_stream", "sse", "text/event-stream"),
        ("llamacpp", "/completion", "sse", "text/event-stream"),
        ("ollama-chat", "/api/chat", "ndjson", "application/x-ndjson"),
        ("ollama-generate", "/api/generate", "ndjson", "application/x-ndjson"),
    ],
)
def test_path_framing_and_accept(dialect: str, path: str, framing: str, accept: str) -> None:
    d = get_dialect(dialect)
    assert d.path_for("my-model") == path
    assert d.framing == framing and d.accept == accept
    assert d.ends_at_eof == (dialect == "triton")


def test_triton_path_quotes_the_model_and_keeps_a_version() -> None:
    d = get_dialect("triton")
    assert d.path_for("ensemble/versions/2") == "/v2/models/ensemble/versions/2/generate_stream"
    assert d.path_for("llama 3?") == "/v2/models/llama%203%3F/generate_stream"


def test_registry_names_and_unknown_name() -> None:
    assert set(DIALECT_NAMES) == {
        "openai-chat",
        "openai-completions",
        "openai-responses",
        "anthropic-messages",
        "tgi",
        "triton",
        "llamacpp",
        "ollama-chat",
        "ollama-generate",
        "openai-embeddings",
        "rerank",
        "tei-rerank",
    }
    with pytest.raises(UnknownNameError) as info:
        get_dialect("tgi2")
    assert "'tgi2' is not registered" in str(info.value) and "ollama-chat" in str(info.value)


# --- request bodies ------------------------------------------------------------------------------------------


def test_openai_chat_body() -> None:
    b = body("openai-chat", Spec(system_prompt="Be brief."), continuous=True)
    assert b == {
        "model": "my-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
        "max_tokens": 128,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    assert body("openai-chat")["stream_options"] == {"include_usage": True}
    assert [m["role"] for m in body("openai-chat")["messages"]] == ["user"]


def test_openai_completions_body() -> None:
    b = body("openai-completions", Spec(system_prompt="Sys."))
    assert b == {
        "model": "my-model",
        "prompt": "Sys. What is the capital of France?",
        "max_tokens": 128,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def test_tgi_body() -> None:
    # The path makes it a stream; `details` gives the final event's token counts.
    assert body("tgi", Spec(max_tokens=64)) == {
        "inputs": "What is the capital of France?",
        "parameters": {"max_new_tokens": 64, "details": True},
    }


def test_triton_body() -> None:
    assert body("triton", Spec(max_tokens=32)) == {
        "text_input": "What is the capital of France?",
        "max_tokens": 32,
        "stream": True,
    }


def test_llamacpp_body() -> None:
    assert body("llamacpp", Spec(max_tokens=16)) == {
        "model": "my-model",
        "prompt": "What is the capital of France?",
        "n_predict": 16,
        "stream": True,
    }
    assert body("llamacpp", continuous=True)["timings_per_token"] is True


def test_ollama_bodies() -> None:
    assert body("ollama-chat", Spec(system_prompt="Be brief.", max_tokens=50)) == {
        "model": "my-model",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the capital of France?"},
        ],
        "stream": True,
        "options": {"num_predict": 50},
    }
    assert body("ollama-generate", Spec(system_prompt="Be brief.", max_tokens=50)) == {
        "model": "my-model",
        "prompt": "What is the capital of France?",
        "system": "Be brief.",
        "stream": True,
        "options": {"num_predict": 50},
    }
    assert "system" not in body("ollama-generate")


@pytest.mark.parametrize(
    ("dialect", "extra", "expected"),
    [
        ("openai-chat", {"ignore_eos": True, "temperature": 0}, {"ignore_eos": True, "temperature": 0}),
        ("openai-chat", {"stream_options": {"include_usage": False}}, {"stream_options": {"include_usage": False}}),
        ("openai-completions", {"max_tokens": 7}, {"max_tokens": 7}),
        (
            "tgi",
            {"parameters": {"decoder_input_details": False}},
            {"parameters": {"max_new_tokens": 128, "details": True, "decoder_input_details": False}},
        ),
        ("triton", {"return_num_output_tokens": True}, {"return_num_output_tokens": True, "max_tokens": 128}),
        ("llamacpp", {"cache_prompt": False}, {"cache_prompt": False, "n_predict": 128}),
        ("ollama-chat", {"options": {"num_ctx": 8192}}, {"options": {"num_predict": 128, "num_ctx": 8192}}),
        ("ollama-generate", {"keep_alive": "5m", "raw": True}, {"keep_alive": "5m", "raw": True}),
    ],
)
def test_extra_body_merges(dialect: str, extra: dict[str, Any], expected: dict[str, Any]) -> None:
    before = orjson.dumps(extra)
    b = body(dialect, extra=extra)
    assert {k: b[k] for k in expected} == expected
    assert orjson.dumps(extra) == before  # the variant's mapping is shared by every request: never modified


# --- Variant.extra_body --------------------------------------------------------------------------------------


def _variant(**kw: Any) -> Variant:
    return Variant(name="v", model="m", **{"base_url": "http://127.0.0.1:8000", **kw})


def test_variant_extra_body_default_and_value() -> None:
    assert _variant(exact_output=False).extra_body == {}
    assert _variant(extra_body={"ignore_eos": True}).extra_body == {"ignore_eos": True}
    schema = scenario_json_schema()["$defs"]["Variant"]["properties"]["extra_body"]
    assert "ignore_eos" in schema["description"]


# --- exact output length (Variant.exact_output -> the dialect's fields) ----------------------------------------

_EXACT = {"ignore_eos": True}


@pytest.mark.parametrize(
    ("dialect", "added"),
    [
        # vLLM / SGLang / TensorRT-LLM: min_tokens also holds past the stop ids of the model's generation config.
        ("openai-chat", {"ignore_eos": True, "min_tokens": 77}),
        ("openai-completions", {"ignore_eos": True, "min_tokens": 77}),
        ("llamacpp", {"ignore_eos": True}),  # n_predict is the length; llama.cpp has no min_tokens
        # min_tokens is a TensorRT-LLM ensemble input and a vLLM-backend parameter; ignore_eos passes along.
        ("triton", {"ignore_eos": True, "min_tokens": 77}),
    ],
)
def test_exact_output_bodies(dialect: str, added: dict[str, Any]) -> None:
    capped = body(dialect, Spec(max_tokens=77))
    exact = body(dialect, Spec(max_tokens=77), extra=_EXACT)
    assert {k: v for k, v in exact.items() if k not in capped} == added
    assert {k: exact[k] for k in capped} == capped
    assert get_dialect(dialect).enforces_length and output_length(dialect, _EXACT) == "enforced"
    assert output_length(dialect, {}) == output_length(dialect, {"ignore_eos": False}) == "max_only"


@pytest.mark.parametrize("dialect", ["tgi", "ollama-chat", "ollama-generate"])
def test_dialects_without_length_control_say_so(dialect: str) -> None:
    assert not get_dialect(dialect).enforces_length
    assert output_length(dialect, _EXACT) == "max_only"
    assert _variant(dialect=dialect).exact_output is False
    assert "ignore_eos" not in _variant(dialect=dialect).extra_body
    with pytest.raises(ValueError, match=f"{dialect} cannot ask its server for an exact output length"):
        _variant(dialect=dialect, exact_output=True)


def test_exact_output_default_and_extra_body_agree() -> None:
    # On by default where the dialect can, carried as extra_body.ignore_eos (a new mapping: the input is kept).
    given: dict[str, Any] = {"temperature": 0}
    v = _variant(extra_body=given)
    assert v.exact_output is True and v.extra_body == {"temperature": 0, "ignore_eos": True}
    assert given == {"temperature": 0}
    assert _variant(exact_output=False).extra_body == {}
    # The user's extra_body.ignore_eos decides when exact_output is not given; both given must agree.
    assert _variant(extra_body={"ignore_eos": False}).exact_output is False
    assert _variant(exact_output=True, extra_body={"ignore_eos": True}).extra_body == {"ignore_eos": True}
    with pytest.raises(ValueError, match="contradicts extra_body.ignore_eos"):
        _variant(exact_output=True, extra_body={"ignore_eos": False})
    # Hosted OpenAI answers 400 to fields it does not know: off by default there, and on when asked.
    for url in ("https://api.openai.com", "https://me.openai.azure.com"):
        assert _variant(base_url=url).exact_output is False
        assert _variant(base_url=url).extra_body == {}
        assert _variant(base_url=url, exact_output=True).extra_body == {"ignore_eos": True}
    assert _variant(base_url="https://api.openai.com.example.net").exact_output is True
    # Validating a dumped variant again gives the same variant.
    assert Variant.model_validate(v.model_dump()) == v


def _sent(v: Variant) -> dict[str, Any]:
    """The body a request of variant `v` carries (the request stream builds it so)."""
    raw = dialect_for(v.dialect, v.max_tokens_field).build_body(Spec(max_tokens=77), v.model, False, v.extra_body)
    obj = orjson.loads(raw)
    assert isinstance(obj, dict)
    return obj


def test_openai_s_api_gets_max_completion_tokens_and_the_others_max_tokens() -> None:
    # OpenAI's reasoning models refuse max_tokens ("Use 'max_completion_tokens' instead"): its host gets the new name.
    hosted = _sent(_variant(base_url="https://api.openai.com"))
    assert hosted["max_completion_tokens"] == 77 and "max_tokens" not in hosted
    for url in ("http://127.0.0.1:8000", "https://me.openai.azure.com", "https://api.openai.com.example.net"):
        local = _sent(_variant(base_url=url))
        assert local["max_tokens"] == 77 and "max_completion_tokens" not in local, url
    # Resolved at load, so the variant (and the report's scenario) says which field went out.
    assert _variant(base_url="https://api.openai.com").max_tokens_field == "max_completion_tokens"
    assert _variant().max_tokens_field == "max_tokens"
    # Completions (no reasoning models there) keep max_tokens even on api.openai.com.
    v = _variant(base_url="https://api.openai.com", dialect="openai-completions")
    assert v.max_tokens_field == "max_tokens" and _sent(v)["max_tokens"] == 77


def test_the_variant_chooses_the_field_explicitly() -> None:
    chosen = _variant(max_tokens_field="max_completion_tokens")  # a local vLLM takes both names
    body = _sent(chosen)
    assert body["max_completion_tokens"] == 77 and "max_tokens" not in body
    assert body["min_tokens"] == 77  # exact_output still asks for exactly that many
    kept = _sent(_variant(base_url="https://api.openai.com", max_tokens_field="max_tokens"))
    assert kept["max_tokens"] == 77 and "max_completion_tokens" not in kept
    assert Variant.model_validate(chosen.model_dump()) == chosen
    with pytest.raises(ValueError, match="only openai-chat requests take max_completion_tokens, not tgi"):
        _variant(dialect="tgi", max_tokens_field="max_completion_tokens")
    with pytest.raises(ValueError, match="max_tokens_field"):
        _variant(max_tokens_field="max_new_tokens")
    with pytest.raises(ValueError, match="cannot cap their output with max_completion_tokens"):
        dialect_for("ollama-chat", "max_completion_tokens")
    assert dialect_for("openai-chat", None) is get_dialect("openai-chat")  # the shared instance when nothing differs
    schema = scenario_json_schema()["$defs"]["Variant"]["properties"]["max_tokens_field"]
    assert "api.openai.com" in schema["description"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"stream": False}, "the variant's own `stream` field"),
        ({"x": {1, 2}}, "expected JSON values"),
    ],
)
def test_variant_extra_body_rejects(value: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _variant(extra_body=value)


# --- the server's message from a non-200 response (http_4xx / http_5xx detail) --------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (  # vLLM (recent)
            b'{"error":{"message":"This model\'s maximum context length is 4096 tokens. However, you requested 5000 '
            b'tokens.","type":"BadRequestError","param":null,"code":400}}',
            "BadRequestError: This model's maximum context length is 4096 tokens. However, you requested 5000 tokens.",
        ),
        (  # vLLM (older), SGLang
            b'{"object":"error","message":"max_tokens must be at least 1, got 0.","type":"BadRequestError",'
            b'"param":null,"code":400}',
            "BadRequestError: max_tokens must be at least 1, got 0.",
        ),
        (  # hosted OpenAI
            b'{"error":{"message":"Incorrect API key provided: sk-abc***xyz.","type":"invalid_request_error",'
            b'"param":null,"code":"invalid_api_key"}}',
            "invalid_request_error: Incorrect API key provided: sk-abc***xyz.",
        ),
        (  # llama.cpp
            b'{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it",'
            b'"type":"exceed_context_size_error","n_prompt_tokens":9000,"n_ctx":8192}}',
            "exceed_context_size_error: the request exceeds the available context size, try increasing it",
        ),
        (  # TGI
            b'{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 '
            b'`inputs` tokens and 200 `max_new_tokens`","error_type":"validation"}',
            "validation: Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 "
            "`inputs` tokens and 200 `max_new_tokens`",
        ),
        (
            b'{"error":"model \\"llama9\\" not found, try pulling it first"}',
            'model "llama9" not found, try pulling it first',
        ),
        (
            b'{"error":"Request for unknown model: \'foo\' is not found"}',
            "Request for unknown model: 'foo' is not found",
        ),
        (
            b'{"detail":[{"type":"missing","loc":["body","messages"],"msg":"Field required","input":{}}]}',
            "messages: Field required",
        ),
        (b'{"detail":"Not Found"}', "Not Found"),
        (b"<html><body>502 Bad Gateway</body></html>\r\n", "<html><body>502 Bad Gateway</body></html>"),
        (b"", ""),
    ],
)
def test_describe_error_body(raw: bytes, expected: str) -> None:
    assert describe_error_body(raw) == expected


def test_describe_error_body_truncates() -> None:
    raw = orjson.dumps({"error": {"message": "x" * 5000, "type": "BadRequestError"}})
    text = describe_error_body(raw, 300)
    assert len(text) == 300 and text.startswith("BadRequestError: xxx") and text.endswith("…")
    assert len(describe_error_body(b"\xff" * 900)) == 500


# --- parsing never raises -------------------------------------------------------------------------------------

JUNK = [
    b"",
    b"null",
    b"[1, 2]",
    b'"text"',
    b"\xff\xfe",
    b'{"choices": {"a": 1}}',
    b'{"choices": [1]}',
    b'{"choices": [{"delta": "x", "finish_reason": 3}], "usage": {"completion_tokens": true}}',
    b'{"choices": [{"delta": {"content": "a"}}], "timings": {"predicted_n": -4}}',
    b'{"token": 5, "index": true, "details": [1]}',
    b'{"token": {"text": "a"}, "generated_text": "a", "details": {"generated_tokens": "many"}}',
    b'{"text_output": [1, 2], "num_output_tokens": [1, 2], "finish_reason": []}',
    b'{"content": 5, "stop": true, "tokens_predicted": "x", "timings": 3}',
    b'{"message": "hi", "done": true, "eval_count": "x", "eval_duration": -1}',
    b'{"error": null, "object": "error"}',
    b'{"error": {"nested": true}}',
    b"[DONE]",
]


@pytest.mark.parametrize("dialect", DIALECT_NAMES)
def test_parse_never_raises(dialect: str) -> None:
    d = get_dialect(dialect)
    for payload in JUNK:
        chunk = d.parse(payload)
        assert isinstance(chunk, Chunk)
        assert chunk.cum_tokens is None or (isinstance(chunk.cum_tokens, int) and chunk.cum_tokens >= 0)


@pytest.mark.parametrize("dialect", DIALECT_NAMES)
def test_non_json_payload_is_malformed(dialect: str) -> None:
    chunk = get_dialect(dialect).parse(b'{"choices": [')
    assert chunk.error is not None and chunk.error.startswith("malformed")


# --- token counting rules the dialects rely on ----------------------------------------------------------------


def _chat(content: str | None, completion_tokens: int | None = None, finish: str | None = None) -> bytes:
    obj: dict[str, Any] = {"choices": [{"index": 0, "delta": {} if content is None else {"content": content}}]}
    obj["choices"][0]["finish_reason"] = finish
    if completion_tokens is not None:
        obj["usage"] = {"prompt_tokens": 5, "completion_tokens": completion_tokens}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _acc(dialect: str = "openai-chat") -> StreamAccumulator:
    acc = StreamAccumulator(RequestRecord("r", "v", "chat"), get_dialect(dialect))
    acc.on_sent(10.0)
    return acc


def test_a_count_that_lags_the_text_does_not_move_the_first_token() -> None:
    # A server whose cumulative count lags one chunk behind its text: the first token is still the first text.
    acc = _acc()
    acc.feed(10.2, _chat("a", 0))
    acc.feed(10.3, _chat("b", 1))
    acc.feed(10.4, _chat("c", 2))
    acc.feed(10.5, _chat(None, 3, "stop") + b"data: [DONE]\n\n")
    rec = acc.finish(10.5)
    assert rec.ttft == pytest.approx(0.2)
    assert list(rec.chunk_tokens) == [1, 1, 1] and rec.token_source == TokenSource.ONE_PER_CHUNK
    assert rec.output_tokens == 3


def test_server_counts_keep_counting_a_chunk_without_a_count() -> None:
    acc = _acc()
    acc.feed(10.2, _chat("ab", 2))
    acc.feed(10.3, _chat("c"))  # this one chunk lacks usage: one token
    acc.feed(10.4, _chat("de", 5))  # the count moved by 3 since the first chunk, one of them already counted
    acc.feed(10.5, b"data: [DONE]\n\n")
    rec = acc.finish(10.5)
    assert list(rec.chunk_tokens) == [2, 1, 2] and rec.token_source == TokenSource.SERVER


def test_error_event_uses_the_servers_message() -> None:
    acc = _acc("llamacpp")
    acc.feed(10.1, b'error: {"code":503,"message":"Loading model","type":"unavailable_error"}\n\n')
    rec = acc.finish(10.2)
    assert rec.error == "server_error" and rec.error_detail == "Loading model"
