"""Wire framings of the simulator's generation routes: the bytes each API puts on the wire.

| route (`POST`) | framing | stream | end of stream |
|---|---|---|---|
| `/v1/chat/completions`, `/v1/completions` | OpenAI, as vLLM | SSE, one event per engine step | `[DONE]` |
| `/v1/messages` | Anthropic (`anthropic.py`) | SSE, named events, one delta per token | `message_stop` |
| `/v1/responses` | OpenAI Responses (`responses.py`) | SSE, named events, a delta per step | `response.incomplete` |
| `/generate_stream` | TGI | SSE (`data:` without a space), one event per token | the event with `generated_text` |
| `/generate` | TGI | none: one JSON body | |
| `/api/chat`, `/api/generate` | Ollama | NDJSON (`stream` defaults to true), one line per token | `done: true` |
| `/v1/embeddings`, `/v1/rerank`, `/rerank` (also TEI's) | pooling (`pooling.py`) | none: one JSON body, one step | |

A framing parses its route's request body and builds every byte of the response: the stream head, the events of an
engine step, the end of the stream, the non-streamed body, error bodies and the fault-injected variants of each
(a mid-stream error event, a truncated event). Timing, ground-truth records and fault decisions stay in
``loadgen.sim.stream`` and ``loadgen.sim.server`` and are the same for every framing: everything an engine step
produced for a request leaves in one write, so a step of k tokens is one OpenAI event carrying k tokens, or k
consecutive TGI events / Ollama lines / Anthropic deltas in that write (those send one event per token); the truth
log records each event with its token count.

Every request generates exactly its token budget (benchmark mode), so ``finish_reason`` / ``done_reason`` is always
``length``.
"""

from __future__ import annotations

from loadgen.sim.framings.anthropic import AnthropicMessages
from loadgen.sim.framings.base import (
    DEFAULT_MAX_TOKENS,
    ApiError,
    Framing,
    SimRequest,
    StreamState,
    greedy_offset,
    token_text,
)
from loadgen.sim.framings.ollama import OllamaChat, OllamaGenerate
from loadgen.sim.framings.openai import OpenAIChat, OpenAICompletions
from loadgen.sim.framings.pooling import Embeddings, RerankRoute
from loadgen.sim.framings.responses import OpenAIResponses
from loadgen.sim.framings.tgi import TGIGenerate

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "FRAMINGS",
    "ApiError",
    "Framing",
    "SimRequest",
    "StreamState",
    "greedy_offset",
    "token_text",
]

#: The generation routes of every simulated variant, by path.
FRAMINGS: dict[str, Framing] = {
    "/v1/chat/completions": OpenAIChat(),
    "/v1/completions": OpenAICompletions(),
    "/v1/messages": AnthropicMessages(),
    "/v1/responses": OpenAIResponses(),
    "/generate_stream": TGIGenerate(stream=True),
    "/generate": TGIGenerate(stream=False),
    "/api/chat": OllamaChat(),
    "/api/generate": OllamaGenerate(),
    "/v1/embeddings": Embeddings(),
    "/v1/rerank": RerankRoute(),
    "/rerank": RerankRoute(),
}
