"""Pooling requests (embeddings, rerank): the bodies they send, the replies they read, the variants the model takes
and refuses, and the items a second the report gives."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import yaml

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from loadgen.protocol.dialects import dialect_for
from loadgen.protocol.dialects.pooling import split_items
from loadgen.report.pooling import pooling_json, pooling_lines
from loadgen.traffic.sampler import RequestSpec


def _spec(words: int, system: int = 0) -> RequestSpec:
    prompt = " ".join(f"w{i}" for i in range(words))
    sys_prompt = " ".join(f"s{i}" for i in range(system))
    return RequestSpec(3, "m", "b", sys_prompt, prompt, words + system, 1)


@pytest.mark.parametrize(("n", "k"), [(10, 3), (10, 10), (7, 1), (3, 8), (1000, 16)])
def test_items_share_the_words_in_order_and_near_equal(n: int, k: int) -> None:
    text = " ".join(f"w{i}" for i in range(n))
    items = split_items(text, k)
    assert len(items) == min(n, k) and " ".join(items) == text
    sizes = [len(x.split(" ")) for x in items]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_an_embeddings_body_carries_the_prompt_as_k_inputs() -> None:
    body = orjson.loads(dialect_for("openai-embeddings", items=4).build_body(_spec(100, 20), "e5", False, {"x": 1}))
    assert body["model"] == "e5" and body["x"] == 1 and "stream" not in body and "max_tokens" not in body
    assert len(body["input"]) == 4 and " ".join(body["input"]).split(" ") == [f"s{i}" for i in range(20)] + [
        f"w{i}" for i in range(100)
    ]


def test_a_rerank_body_is_a_short_query_then_k_documents() -> None:
    body = orjson.loads(dialect_for("rerank", items=5).build_body(_spec(400), "bge", False))
    assert body["query"].split(" ") == [f"w{i}" for i in range(32)]
    assert len(body["documents"]) == 5 and " ".join(body["documents"]).split(" ") == [f"w{i}" for i in range(32, 400)]
    small = orjson.loads(dialect_for("rerank", items=3).build_body(_spec(8), "bge", False))
    assert small["query"] == "w0 w1" and len(small["documents"]) == 3  # a query of n / (k + 1) words


def _read(dialect: str, reply: Any) -> tuple[Any, ...]:
    chunk, text = dialect_for(dialect).parse_whole(orjson.dumps(reply) if not isinstance(reply, bytes) else reply)
    return chunk.done, chunk.error, chunk.malformed, chunk.usage, text


def test_replies_give_the_input_tokens_and_bad_ones_fail_as_malformed() -> None:
    good = {"data": [{"embedding": [0.1, 0.2]}, {"embedding": "AAAA"}], "usage": {"prompt_tokens": 9}}
    assert _read("openai-embeddings", good) == (True, None, False, {"prompt_tokens": 9, "completion_tokens": 0}, "")
    ranked = {"results": [{"index": 1, "relevance_score": 0.9}], "usage": {"total_tokens": 30}}
    assert _read("rerank", ranked)[3] == {"prompt_tokens": 30, "completion_tokens": 0}
    assert _read("rerank", {"results": []})[:3] == (True, None, False)  # top_n 0 results: still a reply
    for dialect, bad in [
        ("openai-embeddings", {"data": [{"index": 0}]}),
        ("openai-embeddings", {"object": "list"}),
        ("rerank", {"results": [{"relevance_score": 1.0}]}),
        ("rerank", b"not json"),
    ]:
        _, error, is_malformed, _, _ = _read(dialect, bad)
        assert error and is_malformed, (dialect, bad)
    _, error, is_malformed, _, _ = _read("openai-embeddings", {"error": {"message": "model not found"}})
    assert "model not found" in error and not is_malformed


def _variant(**fields: Any) -> dict[str, Any]:
    return {"name": "e", "base_url": "http://127.0.0.1:9", "model": "m", **fields}


def test_the_model_makes_pooling_variants_whole_and_refuses_what_cannot_apply() -> None:
    sc = parse_scenario(yaml.safe_dump({"name": "t", "variants": [_variant(dialect="rerank", items_per_request=4)]}))
    assert sc.variants[0].stream is False and sc.variants[0].items_per_request == 4
    for fields, where in [
        ({"dialect": "openai-embeddings", "stream": True}, "variants[0].stream"),
        ({"dialect": "openai-chat", "items_per_request": 4}, "variants[0].items_per_request"),
        ({"dialect": "rerank", "items_per_request": 0}, "variants[0].items_per_request"),
    ]:
        with pytest.raises(ConfigError) as exc:
            parse_scenario(yaml.safe_dump({"name": "t", "variants": [_variant(**fields)]}))
        assert where in str(exc.value), str(exc.value)
    # An SLO on a streamed metric cannot name an embeddings variant: its replies have no first token.
    doc = {"name": "t", "variants": [_variant(dialect="openai-embeddings")]}
    doc["slos"] = [{"metric": "ttft", "stat": "p99", "max_ms": 100, "variant": "e"}]
    with pytest.raises(ConfigError, match=r"slos\[0\].metric"):
        parse_scenario(yaml.safe_dump(doc))


def test_items_a_second_are_requests_a_second_times_the_items() -> None:
    sc = parse_scenario(
        yaml.safe_dump({"name": "t", "variants": [_variant(dialect="openai-embeddings", items_per_request=8)]})
    )
    p = pooling_json(sc.variants[0], {"requests_per_s": 12.5, "input_tokens_per_s": 4000.0})
    assert p == {"kind": "embeddings", "items_per_request": 8, "items_per_s": 100.0, "input_tokens_per_s": 4000.0}
    chat = parse_scenario(yaml.safe_dump({"name": "t", "variants": [_variant()]}))
    assert pooling_json(chat.variants[0], {"requests_per_s": 1.0}) is None
    lines = pooling_lines({"variants": [{"name": "e", "pooling": p, "overall": {"requests_per_s": 12.5}}]})
    assert lines == ["- e: embeddings, 8 inputs a request — 100.0 items/s (12.5 req/s); E2E only, no tokens generated"]


def test_a_tei_rerank_body_is_tei_s_query_and_texts_without_a_model() -> None:
    d = dialect_for("tei-rerank", items=4)
    assert (d.path, d.model_per_request, d.stream) == ("/rerank", False, False)
    body = orjson.loads(d.build_body(_spec(400), "bge", False, {"raw_scores": True}))
    assert set(body) == {"query", "texts", "raw_scores"} and len(body["texts"]) == 4
    assert body["query"].split(" ") == [f"w{i}" for i in range(32)]


def _built(dialect: str, items: int, extra: dict[str, Any] | None = None) -> Any:
    """A stream's dialect that has just built a request of `items` items (60 words: enough for each)."""
    d = dialect_for(dialect, items=items)
    d.build_body(_spec(60), "m", False, extra)
    return d


def _ranks(*indices: int) -> bytes:
    """TEI's reply ranking these indices."""
    return orjson.dumps([{"index": i, "score": 1.0 - i / 10} for i in indices])


def results(*indices: int) -> bytes:
    """A Jina / Cohere-style rerank reply ranking these indices."""
    return orjson.dumps({"results": [{"index": i, "relevance_score": 0.5} for i in indices]})


def vectors(n: int) -> bytes:
    """An embeddings reply of `n` vectors."""
    return orjson.dumps({"data": [{"index": i, "embedding": [0.0]} for i in range(n)]})


def test_a_reply_must_answer_every_item_sent() -> None:
    for dialect, good, bad, what in [
        ("rerank", results(4, 0, 2, 1, 3), results(0, 1), "2 results for the 5 sent"),
        ("tei-rerank", _ranks(3, 1, 0, 4, 2), _ranks(0, 1, 2, 3, 4, 0), "6 ranks for the 5 sent"),
        ("openai-embeddings", vectors(5), vectors(4), "4 embeddings for the 5 sent"),
    ]:
        d = _built(dialect, 5)
        chunk, _ = d.parse_whole(good)
        assert chunk.done and chunk.error is None, dialect
        chunk, _ = d.parse_whole(bad)
        assert chunk.malformed and what in str(chunk.error), (dialect, chunk.error)
    # Each index once, and among the documents sent.
    for bad, what in [(_ranks(0, 1, 2, 3, 9), "an index outside the 5 ranks sent"), (_ranks(0, 1, 1, 3, 4), "twice")]:
        chunk, _ = _built("tei-rerank", 5).parse_whole(bad)
        assert chunk.malformed and what in str(chunk.error), chunk.error
    # top_n in the extra body asks for fewer results: that many is the answer, all of them is not.
    capped = _built("rerank", 5, {"top_n": 2})
    assert capped.parse_whole(results(3, 0))[0].error is None
    assert "5 results for 2 of the 5 sent" in str(capped.parse_whole(results(0, 1, 2, 3, 4))[0].error)


def test_a_tei_reply_is_read_and_a_bad_one_is_classified() -> None:
    d = dialect_for("tei-rerank", items=3)
    chunk, _ = d.parse_whole(b'[{"index": 1, "text": "w", "score": 0.9}, {"index": 0, "score": -2}]')
    assert chunk.done and chunk.error is None and chunk.usage is None  # TEI's reply has no usage
    chunk, _ = d.parse_whole(b'{"error": "Input validation error", "error_type": "Validation"}')
    assert "Input validation error" in str(chunk.error) and not chunk.malformed  # the server's own: server_error


@pytest.mark.parametrize("dialect", ["rerank", "tei-rerank", "openai-embeddings"])
@pytest.mark.parametrize(
    "reply",
    [
        b"",
        b"[",
        b"null",
        b"123",
        b'"ranked"',
        b"[1, 2]",
        b"[" * 5000 + b"]" * 5000,
        b'[{"index": true, "score": 1}]',
        b'[{"index": 0, "score": "high"}]',
        b'{"results": null, "data": null}',
        b'{"results": [{"index": 1e308}], "data": [{"embedding": null}]}',
        b'{"results": [[]], "data": [[]]}',
        b'{"error": {"message": 7}}',
    ],
)
def test_a_misbehaving_server_fails_the_request_never_the_reader(dialect: str, reply: bytes) -> None:
    from loadgen.measure.records import ErrorKind, RequestRecord
    from loadgen.protocol.whole_reply import WholeReplyAccumulator

    d = _built(dialect, 3)
    acc = WholeReplyAccumulator(RequestRecord("r", "v", "m"), d)
    acc.feed(1.0, reply)
    rec = acc.finish(1.5)
    assert rec.error in (ErrorKind.MALFORMED, ErrorKind.SERVER_ERROR), (rec.error, rec.error_detail)
    assert rec.done == 1.5 and rec.error_detail
