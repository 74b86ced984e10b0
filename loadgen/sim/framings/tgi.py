"""TGI's `/generate_stream` (SSE, one event per token, `generated_text` at the end) and `/generate`."""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.sim.framings.base import (
    _TOKEN_ID_BASE,
    _VOCAB,
    TGI_DEFAULT_MAX_NEW_TOKENS,
    ApiError,
    Event,
    Framing,
    SimRequest,
    StreamState,
    _bool,
    _int,
    _object,
    token_text,
)

_TGI_ERROR_TYPES = {400: "validation", 422: "validation", 429: "overloaded", 503: "overloaded"}


class TGIGenerate(Framing):
    """``/generate_stream`` (``stream=True``) or ``/generate``: `{"inputs", "parameters": {"max_new_tokens",
    "details"}}`. TGI's router sends ``details`` only when asked for, and ``input_length`` in them (TGI >= 2.0)."""

    invalid_status = 422
    cut_marker = b'"token":{'

    def __init__(self, stream: bool) -> None:
        self.stream = stream

    def parse(self, body: dict[str, Any]) -> SimRequest:
        inputs = body.get("inputs")
        if not isinstance(inputs, str):
            raise ApiError(422, "Input validation error: `inputs` is required and must be a string", "validation")
        params = _object(body, "parameters", 422)
        value = params.get("max_new_tokens")
        if value is None:
            max_tokens = TGI_DEFAULT_MAX_NEW_TOKENS
        elif not _int(value) or value < 1:
            raise ApiError(422, "Input validation error: `max_new_tokens` must be strictly positive", "validation")
        else:
            max_tokens = value
        details = _bool(params, "details", False, 422)
        return SimRequest(inputs.split(), max_tokens, self.stream, details=details)

    def error_body(self, status: int, message: str, type_: str) -> bytes:
        return orjson.dumps({"error": message, "error_type": _TGI_ERROR_TYPES.get(status, "generation")})

    def _token(self, s: StreamState, i: int) -> dict[str, Any]:
        idx = (s.vocab_offset + i) % len(_VOCAB)
        return {"id": _TOKEN_ID_BASE + idx, "text": _VOCAB[idx], "logprob": -0.25, "special": False}

    def _details(self, s: StreamState, generated: int) -> dict[str, Any]:
        return {
            "finish_reason": "length",
            "generated_tokens": generated,
            "seed": None,
            "input_length": s.prompt_tokens,
        }

    def tokens(self, s: StreamState, start: int, n: int, final: bool) -> list[Event]:
        out: list[Event] = []
        dumps = orjson.dumps
        for i in range(start, start + n):
            obj: dict[str, Any] = {"index": i + 1, "token": self._token(s, i), "generated_text": None, "details": None}
            if final and i == start + n - 1:
                obj["generated_text"] = token_text(s.vocab_offset, 0, i + 1)
                if s.req.details:
                    obj["details"] = self._details(s, i + 1)
            out.append((b"data:" + dumps(obj) + b"\n\n", 1))
        return out

    def error_event(self) -> bytes:
        return (
            b'data:{"error":"Request failed during generation: simulated mid-stream failure '
            b'(loadgen sim fault injection)","error_type":"generation"}\n\n'
        )

    def full(self, s: StreamState, generated: int) -> bytes:
        obj: dict[str, Any] = {"generated_text": token_text(s.vocab_offset, 0, generated)}
        if s.req.details:
            details = self._details(s, generated)
            del details["input_length"]
            details["prefill"] = []
            details["tokens"] = [self._token(s, i) for i in range(generated)]
            obj["details"] = details
        return orjson.dumps(obj)


# ---- Ollama ----
