"""Pooling requests: embeddings and rerank, answered in one JSON reply (no stream, no generated tokens).

| dialect | path | body | reply |
|---|---|---|---|
| `openai-embeddings` | `/v1/embeddings` | `{model, input: [text, ...]}` | `{data: [{embedding}], usage}` |
| `rerank` | `/v1/rerank` | `{model, query, documents: [text, ...]}` | `{results: [{index, relevance_score}]}` |
| `tei-rerank` | `/rerank` | `{query, texts: [text, ...]}` | `[{index, score}]` |

`openai-embeddings` serves vLLM (`--task embed`), TEI's OpenAI route, SGLang and OpenAI's API; `rerank` the
Jina / Cohere-style route vLLM serves for cross-encoders (`/v1/rerank`, also `/rerank`); `tei-rerank` Hugging Face
text-embeddings-inference's own `/rerank` (one model per server, so no `model`; a JSON list back, best first, and no
usage: its input tokens are not counted).

A request's items (a variant's `items_per_request`: the inputs of an embeddings batch, the documents to rank) are cut
from the request's prompt, so the mix's prompt lengths are each request's whole input and the items share it: k
inputs of about n/k words each; for rerank a query of up to 32 words first, the documents after it. Only E2E and
the input tokens of the usage are measured (`WholeReplyAccumulator`); items per second come from the count.

A reply must answer every item sent: an embedding per input, a result per document (or `top_n` of them, where the
request's extra body asks for fewer), each index once and in range. One that does not is a failed request of class
`malformed` saying what it got against what was sent, as is any reply of another shape: a misbehaving server fails
its requests, never the worker reading them. The count a reply is held to is the request this dialect built last:
each stream builds its own pooling dialect (`dialect_for`), and a stream has one request in flight.
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.protocol.dialects._base import (
    Chunk,
    DialectBase,
    RequestLike,
    error_message,
    joined_prompt,
    load_reply,
    malformed,
    malformed_json,
    merge_extra,
)

__all__ = ["POOLING_DIALECTS", "OpenAIEmbeddings", "Rerank", "TEIRerank", "split_items"]

# A rerank query: the head of the request's text, at most this many words (queries are short; documents are not).
_QUERY_WORDS = 32


def split_items(text: str, k: int) -> list[str]:
    """``text`` cut into ``k`` pieces of near-equal word counts (the first ones a word longer), none empty while
    there are words enough."""
    words = text.split(" ")
    n = len(words)
    k = max(1, min(k, n))
    size, extra = divmod(n, k)
    out, at = [], 0
    for i in range(k):
        step = size + (i < extra)
        out.append(" ".join(words[at : at + step]))
        at += step
    return out


class _Pooling(DialectBase):
    framing = "json"
    accept = "application/json"
    replies_whole = True
    stream = False

    # What the reply's items are called, for the message of one that does not answer them all.
    noun = "items"

    def __init__(self, items: int = 1) -> None:
        self.items = items
        # How many items the reply to the request built last must hold (None: nothing built yet, not checked).
        self.expected: int | None = None
        self.sent = 0

    def _built(self, sent: int, extra: dict[str, Any] | None = None) -> None:
        """A request of `sent` items was built; `top_n` in its extra body caps the results a rerank returns."""
        top_n = (extra or {}).get("top_n")
        self.sent = sent
        self.expected = min(sent, top_n) if type(top_n) is int and top_n > 0 else sent

    def _answers(self, indices: list[Any], body: bytes) -> Chunk | None:
        """None when `indices` (each item's, None where the reply gives none) answer the request built last; else
        the malformed chunk saying what came against what was sent."""
        n, want = len(indices), self.expected
        if want is not None and n != want:
            of = f"{want} of the {self.sent}" if want != self.sent else f"the {self.sent}"
            return _mismatch(f"{n} {self.noun} for {of} sent", body)
        if want is None or all(i is None for i in indices):
            return None
        if not all(type(i) is int and 0 <= i < self.sent for i in indices):
            return _mismatch(f"an index outside the {self.sent} {self.noun} sent", body)
        if len(set(indices)) != n:
            return _mismatch("an index given twice", body)
        return None

    def parse(self, payload: bytes) -> Chunk:  # never streamed: the whole reply comes to `parse_whole`
        return Chunk(error=f"malformed: {self.name} replies are never streamed", malformed=True)

    def _reply(self, body: bytes, key: str) -> tuple[dict[str, Any] | None, Chunk | None]:
        obj = load_reply(body)
        if isinstance(obj, Chunk):
            return None, obj
        if type(obj.get(key)) is not list:
            return None, malformed(f"reply (no {key} list)", body)
        return obj, None

    @staticmethod
    def _usage(obj: dict[str, Any]) -> dict[str, Any] | None:
        usage = obj.get("usage")
        if type(usage) is not dict:
            return None
        # The input is all a pooling request's tokens: vLLM's rerank reports total_tokens only.
        prompt = usage.get("prompt_tokens", usage.get("total_tokens"))
        return {"prompt_tokens": prompt, "completion_tokens": 0}


def _mismatch(what: str, body: bytes) -> Chunk:
    return Chunk(error=f"malformed reply: {what}: {body[:120]!r}", malformed=True)


class OpenAIEmbeddings(_Pooling):
    name = "openai-embeddings"
    path = "/v1/embeddings"
    noun = "embeddings"

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        inputs = split_items(joined_prompt(spec), self.items)
        self._built(len(inputs))
        return merge_extra({"model": model, "input": inputs}, extra)

    def parse_whole(self, body: bytes) -> tuple[Chunk, str]:
        obj, failed = self._reply(body, "data")
        if failed is not None:
            return failed, ""
        assert obj is not None
        data = obj["data"]
        if not all(type(d) is dict and type(d.get("embedding")) in (list, str) for d in data):
            return malformed("reply (an item without an embedding)", body), ""
        wrong = self._answers([d.get("index") for d in data], body)
        if wrong is not None:
            return wrong, ""
        return Chunk(True, False, 0, self._usage(obj), None, None), ""


def _query_and_documents(spec: RequestLike, k: int) -> tuple[str, list[str]]:
    """A rerank request's query (the text's head, at most `_QUERY_WORDS` words) and its `k` documents (the rest)."""
    words = joined_prompt(spec).split(" ")
    head = min(_QUERY_WORDS, max(1, len(words) // (k + 1)))
    query, rest = " ".join(words[:head]), " ".join(words[head:]) or " ".join(words)
    return query, split_items(rest, k)


class Rerank(_Pooling):
    name = "rerank"
    path = "/v1/rerank"
    noun = "results"

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        query, documents = _query_and_documents(spec, self.items)
        self._built(len(documents), extra)
        return merge_extra({"model": model, "query": query, "documents": documents}, extra)

    def parse_whole(self, body: bytes) -> tuple[Chunk, str]:
        obj, failed = self._reply(body, "results")
        if failed is not None:
            return failed, ""
        assert obj is not None
        if not all(type(r) is dict and type(r.get("index")) is int for r in obj["results"]):
            return malformed("reply (a result without its index)", body), ""
        wrong = self._answers([r["index"] for r in obj["results"]], body)
        if wrong is not None:
            return wrong, ""
        return Chunk(True, False, 0, self._usage(obj), None, None), ""


class TEIRerank(_Pooling):
    """text-embeddings-inference's own `/rerank`: `{query, texts}` in, a JSON list of `{index, score}` out."""

    name = "tei-rerank"
    path = "/rerank"
    noun = "ranks"
    model_per_request = False  # one model per TEI server: the body names none

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        query, texts = _query_and_documents(spec, self.items)
        self._built(len(texts))
        return merge_extra({"query": query, "texts": texts}, extra)

    def parse_whole(self, body: bytes) -> tuple[Chunk, str]:
        try:
            ranks = orjson.loads(body)
        except orjson.JSONDecodeError:
            return malformed_json(body), ""
        if type(ranks) is dict:  # an error TEI (or a proxy) answered with a 200
            msg = error_message(ranks)
            return (Chunk(error=msg) if msg is not None else malformed("reply (not a list of ranks)", body)), ""
        if type(ranks) is not list:
            return malformed("reply (not a list of ranks)", body), ""
        if not all(type(r) is dict and type(r.get("index")) is int and _is_score(r.get("score")) for r in ranks):
            return malformed("reply (a rank without its index and score)", body), ""
        wrong = self._answers([r["index"] for r in ranks], body)
        if wrong is not None:
            return wrong, ""
        return Chunk(True, False, 0, None, None, None), ""


def _is_score(value: Any) -> bool:
    return type(value) in (int, float)


POOLING_DIALECTS: tuple[str, ...] = (OpenAIEmbeddings.name, Rerank.name, TEIRerank.name)
