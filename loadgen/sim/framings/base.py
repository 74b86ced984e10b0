"""What every simulated wire framing shares: the request, the per-stream state, the `Framing` base and the body
readers that turn a bad request into the API's own error."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "ApiError",
    "Framing",
    "SimRequest",
    "StreamState",
    "greedy_offset",
    "token_text",
]

#: Tokens generated when an OpenAI request gives no ``max_tokens`` (vLLM's completions default).
DEFAULT_MAX_TOKENS = 16
#: TGI's default ``max_new_tokens`` (router >= 1.4).
TGI_DEFAULT_MAX_NEW_TOKENS = 100
#: Ollama's default ``num_predict`` is -1 (until EOS or the context is full), which a simulator without EOS cannot
#: do; it generates this many instead, the default of older Ollama releases.
OLLAMA_DEFAULT_NUM_PREDICT = 128

# One whitespace-free word per token, each with a leading space: a client that splits on whitespace counts tokens
# exactly, and the text is readable in a debug dump.
_VOCAB: tuple[str, ...] = (
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " with", " was", " on", " be",
    " by", " at", " this", " are", " from", " or", " an", " have", " not", " they", " which", " one", " you",
    " were", " all", " we", " her", " she", " there", " would", " their", " will", " when", " who", " him",
    " been", " has", " more", " if", " no", " out", " so", " said", " what", " up", " its", " about",
    " into", " than", " them", " can", " only", " other", " new", " some", " could", " time", " these",
    " two", " may", " then", " do", " first", " any",
)  # fmt: skip
# Token ids of the vocabulary words (TGI reports them): arbitrary, stable, clear of the special-token range.
_TOKEN_ID_BASE = 1000


# A perturbed token is this far along the vocabulary from the one it replaces: always another word.
_PERTURB_SHIFT = len(_VOCAB) // 2


def token_text(offset: int, start: int, n: int, perturbed: frozenset[int] = frozenset()) -> str:
    """Text of tokens ``start`` .. ``start + n - 1`` of a request whose vocabulary offset is ``offset``; a position
    in ``perturbed`` has another word than the unperturbed reply's."""
    vocab, off, size = _VOCAB, offset + start, len(_VOCAB)
    if not perturbed:
        return "".join(vocab[(off + i) % size] for i in range(n))
    return "".join(vocab[(off + i + (_PERTURB_SHIFT if start + i in perturbed else 0)) % size] for i in range(n))


def greedy_offset(words: list[str]) -> tuple[int, int]:
    """A greedy reply's vocabulary offset and the prompt's digest (which seeds its perturbed positions): a function
    of the prompt alone, so every variant answers the same prompt with the same words."""
    digest = int.from_bytes(hashlib.blake2b(" ".join(words).encode(), digest_size=8).digest(), "big")
    return digest % len(_VOCAB), digest


class ApiError(Exception):
    """A request the route refuses: ``status``, message and an OpenAI-style error type; the route's framing
    formats the body."""

    def __init__(self, status: int, message: str, type_: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status, self.message, self.type = status, message, type_


@dataclass(slots=True)
class SimRequest:
    """What the engine and the framing need from a parsed request body."""

    words: list[str]
    max_tokens: int
    stream: bool
    #: The ``model`` the client asked for; empty: the server fills in its variant name.
    model: str = ""
    #: OpenAI ``stream_options.include_usage``: a usage-only chunk before ``[DONE]``.
    include_usage: bool = False
    #: OpenAI ``stream_options.continuous_usage_stats``: cumulative usage in every chunk.
    continuous: bool = False
    #: TGI ``parameters.details``: ``details`` in the last event / the body.
    details: bool = False
    #: vLLM's ``priority`` (OpenAI routes; lower is more urgent): orders the engine's queue under priority scheduling.
    priority: int = 0
    #: ``temperature: 0`` (OpenAI routes): the reply is a function of the prompt, the same in every variant but
    #: for the positions the variant's ``perturb_share`` changes; else it follows the server's request count.
    greedy: bool = False
    #: OpenAI chat with ``tools``: the function the reply calls instead of answering ("": none; framings/tools.py);
    #: with ``response_format`` json_schema / json_object, the content is a JSON object.
    tool_call: str = ""
    json_reply: bool = False
    #: The tool call whose result (``role: tool``) the request's last message sends back ("": none): an agent's turn.
    tool_result: str = ""


class StreamState(Protocol):
    """The per-request state a framing reads (``loadgen.sim.stream.RequestStream``)."""

    rid: str
    req: SimRequest
    created: int
    arrival: float
    vocab_offset: int
    #: Token positions of a greedy reply that differ from the baseline's (the profile's ``perturb_share``).
    perturbed: frozenset[int]
    #: ``time.monotonic()`` of the engine step that produced the first token, None before it.
    first_step: float | None
    #: How many of the reply's first tokens are a reasoning model's thinking (the profile's ``reasoning_tokens``,
    #: at most max_tokens; 0 on routes that stream no thinking: see ``Framing.reasoning``).
    reasoning_tokens: int

    @property
    def prompt_tokens(self) -> int: ...

    @property
    def cached_tokens(self) -> int: ...


#: One event of a stream: its bytes and the number of generated tokens it carries.
Event = tuple[bytes, int]


class Framing:
    """Base of the route framings; the defaults are those of SSE."""

    content_type = "text/event-stream"
    #: Send the response head as soon as the request is queued (else with the first token write, like Ollama).
    head_on_accept = True
    #: Status of a request that is well-formed JSON but invalid (too long for the KV cache, bad field types).
    invalid_status = 400
    #: A truncated event is cut right after this (what a crashed writer leaves behind); else in the middle.
    cut_marker = b""
    #: What ends one event on the wire.
    delimiter = b"\n\n"
    #: The route streams a reasoning model's thinking apart from its answer (OpenAI chat's ``reasoning_content``).
    reasoning = False

    def parse(self, body: dict[str, Any]) -> SimRequest:
        raise NotImplementedError

    def error_body(self, status: int, message: str, type_: str) -> bytes:
        return orjson.dumps({"error": {"message": message, "type": type_, "param": None, "code": status}})

    def head(self, s: StreamState) -> bytes:
        """Body bytes sent with the stream's head, before any token."""
        return b""

    def tokens(self, s: StreamState, start: int, n: int, final: bool) -> list[Event]:
        """The events of one engine step that produced tokens ``start`` .. ``start + n - 1``; ``final``: the
        request's last step (not cut short by a fault)."""
        raise NotImplementedError

    def end(self, s: StreamState, generated: int) -> bytes:
        """Bytes after the final step's events (usage, ``[DONE]``, a closing line)."""
        return b""

    def error_event(self) -> bytes:
        """A mid-stream error report, in the route's own shape."""
        raise NotImplementedError

    def truncated(self, event: bytes) -> bytes:
        """``event`` cut short, still delimited like a whole event, so a client parses it and finds bad JSON."""
        cut = event.find(self.cut_marker) if self.cut_marker else -1
        body = event[: cut + len(self.cut_marker)] if cut >= 0 else event[: len(event) // 2]
        return body.rstrip(b"\n") + self.delimiter

    def full(self, s: StreamState, generated: int) -> bytes:
        """The non-streamed response body."""
        raise NotImplementedError


# ---- helpers shared by the parsers ----


def _object(body: dict[str, Any], key: str, status: int) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ApiError(status, f"'{key}' must be an object")
    return value


def _bool(body: dict[str, Any], key: str, default: bool, status: int) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise ApiError(status, f"'{key}' must be a boolean")
    return value


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _model(body: dict[str, Any], status: int) -> str:
    model = body.get("model") or ""
    if not isinstance(model, str):
        raise ApiError(status, "'model' must be a string")
    return model


# ---- OpenAI ----


def _content_words(content: Any) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return content.split()
    if isinstance(content, list):  # OpenAI content parts: text parts by their words, images by their size
        words: list[str] = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                words.extend(part["text"].split())
            elif isinstance(part, dict) and part.get("type") == "image_url":
                from loadgen.sim.image_tokens import image_words  # Pillow: only when an image arrives

                try:
                    words.extend(image_words(part.get("image_url")))
                except ValueError as e:  # not an image it can read: refused, as a server refuses it
                    raise ApiError(400, str(e)) from None
        return words
    raise ApiError(400, "message content must be a string, a list of content parts or null")


def _message_words(messages: Any, status: int, content_types: str = "any") -> list[str]:
    if not isinstance(messages, list) or not messages:
        raise ApiError(status, "'messages' is required and must be a non-empty list")
    words: list[str] = []
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise ApiError(status, "each message must be an object with a string 'role'")
        content = m.get("content")
        if content_types == "str" and not isinstance(content, str | None):
            raise ApiError(status, "message content must be a string")
        words.extend(_content_words(content))
    return words
