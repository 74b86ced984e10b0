"""Protocol dialects: how a request is framed for a server and how its stream chunks are read.

A dialect turns a `RequestSpec` into a path and a JSON body, and turns one decoded stream payload into a `Chunk`:
did it carry generated tokens, the server's token count if it sent one, final usage, server timings, or an error.
Only the dialect knows a server's JSON shape; timing stays in the stream reader (`loadgen.stream`).

One module per server family:

| dialect | path | framing | end of stream |
|---|---|---|---|
| `openai-chat` | `/v1/chat/completions` | SSE | `[DONE]` |
| `openai-completions` | `/v1/completions` | SSE | `[DONE]` |
| `tgi` | `/generate_stream` | SSE | the event with `generated_text` |
| `triton` | `/v2/models/{model}/generate_stream` | SSE | the complete HTTP body |
| `llamacpp` | `/completion` | SSE | the event with `stop: true` |
| `ollama-chat` | `/api/chat` | NDJSON | the line with `done: true` |
| `ollama-generate` | `/api/generate` | NDJSON | the line with `done: true` |

The OpenAI dialects serve vLLM, SGLang, llama.cpp's OAI server, TensorRT-LLM's `trtllm-serve`, LightLLM, TGI's
Messages API and hosted OpenAI-compatible APIs (TLS, key from `api_key_env`).
"""

from __future__ import annotations

from ..registry import Registry
from ._base import Chunk, Dialect, RequestLike, describe_error_body
from .llamacpp import LlamaCppCompletion
from .ollama import OllamaChat, OllamaGenerate
from .openai import OpenAIChat, OpenAICompletions
from .tgi import TGIGenerate
from .triton import TritonGenerate

__all__ = [
    "Chunk",
    "DIALECT_NAMES",
    "Dialect",
    "RequestLike",
    "describe_error_body",
    "dialect_registry",
    "get_dialect",
]

DIALECT_NAMES: tuple[str, ...] = (
    "openai-chat",
    "openai-completions",
    "tgi",
    "triton",
    "llamacpp",
    "ollama-chat",
    "ollama-generate",
)

_registry: Registry[Dialect] | None = None


def dialect_registry() -> Registry[Dialect]:
    reg: Registry[Dialect] = Registry("dialect")
    dialects: tuple[Dialect, ...] = (
        OpenAIChat(),
        OpenAICompletions(),
        TGIGenerate(),
        TritonGenerate(),
        LlamaCppCompletion(),
        OllamaChat(),
        OllamaGenerate(),
    )
    for d in dialects:
        reg.register(d.name, d)
    assert tuple(reg.names()) == tuple(sorted(DIALECT_NAMES))
    return reg


def get_dialect(name: str) -> Dialect:
    """The dialect called `name` (dialects are stateless and shared); unknown names list the known ones."""
    global _registry
    if _registry is None:
        _registry = dialect_registry()
    return _registry.get(name)
