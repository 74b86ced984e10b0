"""Protocol dialects: how a request is framed for a server and how its stream chunks are read.

A dialect turns a `RequestSpec` into a path and a JSON body, and turns one decoded stream payload into a `Chunk`:
did it carry generated tokens, the server's token count if it sent one, final usage, server timings, or an error.
Only the dialect knows a server's JSON shape; timing stays in the stream reader (`loadgen.protocol.accumulator`).

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

Output length (`output_length`): `enforced` when the dialect can ask its server for exactly max_tokens and the
variant does (`ignore_eos: true` in its extra body: openai-*, llamacpp, triton), else `max_only`: max_tokens is a
cap and a request may stop early at EOS (tgi and ollama-* have no such option).

Priority classes (`priority_in_body`): openai-* put a class's `priority` in the body (vLLM, SGLang); the others
have no such field, and their requests carry the class's headers only.
"""

from __future__ import annotations

from typing import Any, Literal

from loadgen.protocol.dialects._base import Chunk, Dialect, RequestLike, describe_error_body, exact_output
from loadgen.protocol.dialects.llamacpp import LlamaCppCompletion
from loadgen.protocol.dialects.ollama import OllamaChat, OllamaGenerate
from loadgen.protocol.dialects.openai import OpenAIChat, OpenAICompletions
from loadgen.protocol.dialects.tgi import TGIGenerate
from loadgen.protocol.dialects.triton import TritonGenerate
from loadgen.registry import Registry, UnknownNameError

__all__ = [
    "Chunk",
    "DIALECT_NAMES",
    "Dialect",
    "RequestLike",
    "describe_error_body",
    "dialect_registry",
    "get_dialect",
    "output_length",
]

# Dialects are stateless: one shared instance each. Their names (each class's `name`) are the only list of them.
_DIALECTS: tuple[Dialect, ...] = (
    OpenAIChat(),
    OpenAICompletions(),
    TGIGenerate(),
    TritonGenerate(),
    LlamaCppCompletion(),
    OllamaChat(),
    OllamaGenerate(),
)
DIALECT_NAMES: tuple[str, ...] = tuple(d.name for d in _DIALECTS)


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


def output_length(dialect: str, extra: dict[str, Any] | None) -> Literal["enforced", "max_only"]:
    """Whether requests of a variant of `dialect` sending `extra` generate exactly max_tokens, as asked."""
    return "enforced" if get_dialect(dialect).enforces_length and exact_output(extra) else "max_only"
