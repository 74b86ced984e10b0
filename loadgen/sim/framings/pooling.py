"""The simulator's pooling routes: `/v1/embeddings` (OpenAI, as vLLM's `--task embed`) and `/v1/rerank` (`/rerank`;
Jina / Cohere style, as vLLM serves a cross-encoder). One JSON reply each, never a stream.

`/rerank` also speaks text-embeddings-inference's own API, told apart by the body: `{query, texts}` (and optionally
`return_text`) is answered as TEI does, a JSON list of `{index, score}` best first, with no usage; `{query,
documents}` as vLLM does. (A real server serves one of the two; the simulator serves both so either dialect can be
tested against it.)

An embedding or a ranking is one forward pass over the inputs: the engine prefills every input token (all of a
request's inputs as one prompt, so its batch costs what its tokens cost) and takes one step, whose end is the reply.
The vectors and scores are seeded from the inputs' text: the same input gets the same embedding in every variant.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.sim.framings.base import ApiError, Framing, SimRequest, StreamState, _model

__all__ = ["Embeddings", "RerankRoute"]

# Numbers per embedding vector: small, since only the reply's shape and size matter to a load test.
_DIM = 8


@dataclass(slots=True)
class PoolingRequest(SimRequest):
    """A pooling request: its inputs (or, for rerank, its documents after the query), kept for the reply."""

    items: tuple[str, ...] = ()
    #: rerank: the best this many results only (None: all).
    top_n: int | None = None
    #: rerank asked in TEI's own shape (`texts`): answered in it; with `return_text`, each rank carries its text.
    tei: bool = False
    return_text: bool = False


def _texts(value: Any, field: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return value
    raise ApiError(400, f"'{field}' must be a string or a non-empty list of strings")


def _unit(text: str, k: int) -> float:
    digest = hashlib.blake2b(f"{k}\x1f{text}".encode(), digest_size=8).digest()
    return struct.unpack(">Q", digest)[0] / 2**64


class _Pooling(Framing):
    content_type = "application/json"
    head_on_accept = False

    def tokens(self, s: StreamState, start: int, n: int, final: bool) -> list[tuple[bytes, int]]:
        return []  # never streamed: `full` is the reply

    def error_event(self) -> bytes:
        return b""


class Embeddings(_Pooling):
    def parse(self, body: dict[str, Any]) -> SimRequest:
        inputs = _texts(body.get("input"), "input")
        words = [w for text in inputs for w in text.split()]
        if not words:
            raise ApiError(400, "'input' holds no text")
        return PoolingRequest(words, 1, False, _model(body, 400), items=tuple(inputs))

    def full(self, s: StreamState, generated: int) -> bytes:
        req = s.req
        assert isinstance(req, PoolingRequest)
        data = [
            {"object": "embedding", "index": i, "embedding": [round(_unit(text, k) * 2 - 1, 6) for k in range(_DIM)]}
            for i, text in enumerate(req.items)
        ]
        usage = {"prompt_tokens": s.prompt_tokens, "total_tokens": s.prompt_tokens}
        return orjson.dumps(
            {"id": f"embd-{s.rid}", "object": "list", "created": s.created, "model": req.model, "data": data,
             "usage": usage}
        )  # fmt: skip


class RerankRoute(_Pooling):
    def parse(self, body: dict[str, Any]) -> SimRequest:
        query = body.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ApiError(400, "'query' must be a non-empty string")
        if "texts" in body and "documents" not in body:  # TEI's own /rerank
            texts = _texts(body.get("texts"), "texts")
            words = query.split() + [w for text in texts for w in text.split()]
            return_text = body.get("return_text") is True
            return PoolingRequest(
                words, 1, False, _model(body, 400), items=tuple(texts), tei=True, return_text=return_text
            )
        documents = _texts(body.get("documents"), "documents")
        top_n = body.get("top_n")
        if top_n is not None and (not isinstance(top_n, int) or isinstance(top_n, bool) or top_n < 1):
            raise ApiError(400, "'top_n' must be a positive integer")
        words = query.split() + [w for text in documents for w in text.split()]
        return PoolingRequest(words, 1, False, _model(body, 400), items=tuple(documents), top_n=top_n)

    def full(self, s: StreamState, generated: int) -> bytes:
        req = s.req
        assert isinstance(req, PoolingRequest)
        scores = sorted(((round(_unit(text, 0), 6), i) for i, text in enumerate(req.items)), reverse=True)
        if req.tei:
            texts = req.items if req.return_text else None
            return orjson.dumps([{"index": i, **({"text": texts[i]} if texts else {}), "score": v} for v, i in scores])
        results = [{"index": i, "relevance_score": score} for score, i in scores[: req.top_n]]
        return orjson.dumps(
            {"id": f"rerank-{s.rid}", "model": req.model, "usage": {"total_tokens": s.prompt_tokens},
             "results": results}
        )  # fmt: skip
