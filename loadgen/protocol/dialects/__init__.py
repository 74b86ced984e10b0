"""Protocol dialects: how a request is framed for a server and how its stream chunks are read.

A dialect turns a `RequestSpec` into a path and a JSON body, and turns one decoded stream payload into a `Chunk`:
did it carry generated tokens, the server's token count if it sent one, final usage, server timings, or an error.
Only the dialect knows a server's JSON shape; timing stays in the stream reader (`loadgen.protocol.accumulator`).

One module per server family:

| dialect | path | framing | end of stream |
|---|---|---|---|
| `openai-chat` | `/v1/chat/completions` | SSE | `[DONE]` |
| `openai-completions` | `/v1/completions` | SSE | `[DONE]` |
| `anthropic-messages` | `/v1/messages` | SSE (named events) | `message_stop` (`anthropic.py`) |
| `openai-responses` | `/v1/responses` | SSE (named events) | `response.completed` / `.incomplete` / `.failed` |
| `tgi` | `/generate_stream` | SSE | the event with `generated_text` |
| `triton` | `/v2/models/{model}/generate_stream` | SSE | the complete HTTP body |
| `llamacpp` | `/completion` | SSE | the event with `stop: true` |
| `ollama-chat` | `/api/chat` | NDJSON | the line with `done: true` |
| `ollama-generate` | `/api/generate` | NDJSON | the line with `done: true` |
| `openai-embeddings` | `/v1/embeddings` | one JSON reply | the body (`pooling.py`) |
| `rerank` | `/v1/rerank` | one JSON reply | the body (`pooling.py`) |
| `tei-rerank` | `/rerank` | one JSON reply (a list) | the body (`pooling.py`) |

The OpenAI dialects serve vLLM, SGLang, llama.cpp's OAI server, TensorRT-LLM's `trtllm-serve`, LightLLM, TGI's
Messages API and hosted OpenAI-compatible APIs (TLS, key from `api_key_env`).

Output length (`output_length`): `enforced` when the dialect can ask its server for exactly max_tokens and the
variant does (`ignore_eos: true` in its extra body: openai-*, llamacpp, triton), else `max_only`: max_tokens is a
cap and a request may stop early at EOS (tgi, ollama-* and anthropic-messages have no such option).

Whole replies (`replies_whole`): openai-chat and openai-completions can ask for one JSON reply instead of a stream
(`stream: false`, a variant's `stream`); the pooling dialects (embeddings, rerank, tei-rerank) only ever get one;
the others always stream, and a variant of theirs that asks is refused.

Priority classes (`priority_in_body`): openai-* put a class's `priority` in the body (vLLM, SGLang); the others
have no such field, and their requests carry the class's headers only.

LoRA adapters (`model_per_request`): every dialect but tgi and tei-rerank (no `model` field) and triton (the model is
in the path) names its model in the body, so each request may name another adapter (a variant's `adapters`).
"""

from __future__ import annotations

from typing import Any, Literal

from loadgen.protocol.dialects._base import Chunk, Dialect, RequestLike, describe_error_body, exact_output
from loadgen.protocol.dialects.anthropic import AnthropicMessages
from loadgen.protocol.dialects.llamacpp import LlamaCppCompletion
from loadgen.protocol.dialects.ollama import OllamaChat, OllamaGenerate
from loadgen.protocol.dialects.openai import OpenAIChat, OpenAICompletions
from loadgen.protocol.dialects.pooling import POOLING_DIALECTS, OpenAIEmbeddings, Rerank, TEIRerank
from loadgen.protocol.dialects.responses import OpenAIResponses
from loadgen.protocol.dialects.tgi import TGIGenerate
from loadgen.protocol.dialects.triton import TritonGenerate
from loadgen.registry import Registry, UnknownNameError

__all__ = [
    "Chunk",
    "DIALECT_NAMES",
    "MODEL_PER_REQUEST_DIALECTS",
    "POOLING_DIALECTS",
    "WHOLE_REPLY_DIALECTS",
    "Dialect",
    "RequestLike",
    "describe_error_body",
    "dialect_for",
    "dialect_registry",
    "get_dialect",
    "output_length",
]

# Dialects are stateless: one shared instance each (and an openai-chat of another output-cap field: `dialect_for`),
# but for the pooling ones, which hold the item count of the request they built last: `dialect_for` gives each stream
# its own.
# Their names (each class's `name`) are the only list of them.
_DIALECTS: tuple[Dialect, ...] = (
    OpenAIChat(),
    OpenAICompletions(),
    AnthropicMessages(),
    OpenAIResponses(),
    TGIGenerate(),
    TritonGenerate(),
    LlamaCppCompletion(),
    OllamaChat(),
    OllamaGenerate(),
    OpenAIEmbeddings(),
    Rerank(),
    TEIRerank(),
)
DIALECT_NAMES: tuple[str, ...] = tuple(d.name for d in _DIALECTS)
# The dialects whose requests may each name another model (a variant's `adapters`).
MODEL_PER_REQUEST_DIALECTS: tuple[str, ...] = tuple(d.name for d in _DIALECTS if d.model_per_request)
# The dialects that can ask for one whole reply instead of a stream (a variant's `stream: false`).
WHOLE_REPLY_DIALECTS: tuple[str, ...] = tuple(d.name for d in _DIALECTS if d.replies_whole)


def dialect_registry() -> Registry[Dialect]:
    """A registry of the built-in dialects (an unknown name fails listing the known ones)."""
    reg: Registry[Dialect] = Registry("dialect")
    for d in _DIALECTS:
        reg.register(d.name, d)
    return reg


_BY_NAME = {d.name: d for d in _DIALECTS}


def get_dialect(name: str) -> Dialect:
    """The dialect called `name`; unknown names list the known ones."""
    dialect = _BY_NAME.get(name)
    if dialect is None:
        raise UnknownNameError("dialect", name, sorted(_BY_NAME))
    return dialect


def dialect_for(name: str, max_tokens_field: str | None = None, stream: bool = True, items: int = 1) -> Dialect:
    """The dialect a variant's requests are built with: `name`'s, its output cap sent as `max_tokens_field` (a
    variant's setting: `max_completion_tokens` for OpenAI's API) where that is not the dialect's own field, asking
    for a stream or (`stream=False`, a variant's `stream: false`) for one whole reply; a pooling request (embeddings,
    rerank) with `items` inputs or documents (a variant's `items_per_request`)."""
    dialect = get_dialect(name)
    if isinstance(dialect, OpenAIEmbeddings | Rerank | TEIRerank):
        return type(dialect)(items)
    custom_cap = max_tokens_field not in (None, "max_tokens")
    if custom_cap and not isinstance(dialect, OpenAIChat):
        raise ValueError(f"{name} requests cannot cap their output with {max_tokens_field}")
    if not stream and not dialect.replies_whole:
        raise ValueError(f"{name} requests are always streamed: stream: false is for {', '.join(WHOLE_REPLY_DIALECTS)}")
    if not custom_cap and stream:
        return dialect
    if isinstance(dialect, OpenAIChat):
        return OpenAIChat(max_tokens_key=max_tokens_field or "max_tokens", stream=stream)
    if isinstance(dialect, OpenAIResponses):
        return OpenAIResponses(stream=stream)
    return OpenAICompletions(stream=stream)


def output_length(dialect: str, extra: dict[str, Any] | None) -> Literal["enforced", "max_only"]:
    """Whether requests of a variant of `dialect` sending `extra` generate exactly max_tokens, as asked."""
    return "enforced" if get_dialect(dialect).enforces_length and exact_output(extra) else "max_only"
