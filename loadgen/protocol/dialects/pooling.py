"""Pooling requests: embeddings and rerank, answered in one JSON reply (no stream, no generated tokens).

| dialect | path | body | reply |
|---|---|---|---|
| `openai-embeddings` | `/v1/embeddings` | `{model, input: [text, ...]}` | `{data: [{embedding}], usage}` |
| `rerank` | `/v1/rerank` | `{model, query, documents: [text, ...]}` | `{results: [{index, relevance_score}]}` |

`openai-embeddings` serves vLLM (`--task embed`), TEI's OpenAI route, SGLang and OpenAI's API; `rerank` the
Jina / Cohere-style route vLLM serves for cross-encoders (`/v1/rerank`, also `/rerank`).

A request's items (a variant's `items_per_request`: the inputs of an embeddings batch, the documents to rank) are cut
from the request's prompt, so the mix's prompt lengths are each request's whole input and the items share it: k
inputs of about n/k words each; for rerank a query of up to 32 words first, the documents after it. Only E2E and
the input tokens of the usage are measured (`WholeReplyAccumulator`); items per second come from the count.
"""

from __future__ import annotations

from typing import Any

from loadgen.protocol.dialects._base import (
    Chunk,
    DialectBase,
    RequestLike,
    joined_prompt,
    load_reply,
    malformed,
    merge_extra,
)

__all__ = ["POOLING_DIALECTS", "OpenAIEmbeddings", "Rerank", "split_items"]

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

    def __init__(self, items: int = 1) -> None:
        self.items = items

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


class OpenAIEmbeddings(_Pooling):
    name = "openai-embeddings"
    path = "/v1/embeddings"

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        body: dict[str, Any] = {"model": model, "input": split_items(joined_prompt(spec), self.items)}
        return merge_extra(body, extra)

    def parse_whole(self, body: bytes) -> tuple[Chunk, str]:
        obj, failed = self._reply(body, "data")
        if failed is not None:
            return failed, ""
        assert obj is not None
        data = obj["data"]
        if not all(type(d) is dict and type(d.get("embedding")) in (list, str) for d in data):
            return malformed("reply (an item without an embedding)", body), ""
        return Chunk(True, False, 0, self._usage(obj), None, None), ""


class Rerank(_Pooling):
    name = "rerank"
    path = "/v1/rerank"

    def build_body(
        self, spec: RequestLike, model: str, continuous_usage: bool, extra: dict[str, Any] | None = None
    ) -> bytes:
        words = joined_prompt(spec).split(" ")
        head = min(_QUERY_WORDS, max(1, len(words) // (self.items + 1)))
        query, rest = " ".join(words[:head]), " ".join(words[head:]) or " ".join(words)
        body: dict[str, Any] = {"model": model, "query": query, "documents": split_items(rest, self.items)}
        return merge_extra(body, extra)

    def parse_whole(self, body: bytes) -> tuple[Chunk, str]:
        obj, failed = self._reply(body, "results")
        if failed is not None:
            return failed, ""
        assert obj is not None
        if not all(type(r) is dict and type(r.get("index")) is int for r in obj["results"]):
            return malformed("reply (a result without its index)", body), ""
        return Chunk(True, False, 0, self._usage(obj), None, None), ""


POOLING_DIALECTS: tuple[str, ...] = (OpenAIEmbeddings.name, Rerank.name)
