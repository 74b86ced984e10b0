"""Ollama's `/api/chat` and `/api/generate` framings (NDJSON, one line per token, `done: true`)."""

from __future__ import annotations

import time
from typing import Any

import orjson

from loadgen.sim.framings.base import (
    _VOCAB,
    OLLAMA_DEFAULT_NUM_PREDICT,
    ApiError,
    Event,
    Framing,
    SimRequest,
    StreamState,
    _bool,
    _int,
    _message_words,
    _model,
    _object,
    token_text,
)


def _created_at() -> str:
    """Now as Go's RFC 3339 with nanoseconds, in UTC (Ollama's ``created_at``)."""
    ns = time.time_ns()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ns // 1_000_000_000)) + f".{ns % 1_000_000_000:09d}Z"


class _Ollama(Framing):
    """``/api/chat`` and ``/api/generate``: ``stream`` defaults to true, ``options.num_predict`` is the budget.

    The final line's durations are the simulator's own: ``prompt_eval_duration`` from arrival to the first token's
    engine step (queueing included), ``eval_duration`` from there to the last step, ``total_duration`` arrival to
    the last step, ``load_duration`` 0 (the model is always loaded). ``prompt_eval_count`` leaves out prompt tokens
    served from the prefix cache and is omitted when zero, as Ollama does.
    """

    content_type = "application/x-ndjson"
    # Ollama (gin) writes the head together with the first line.
    head_on_accept = False
    delimiter = b"\n"

    def parse(self, body: dict[str, Any]) -> SimRequest:
        model = _model(body, 400)
        if not model:
            raise ApiError(400, "model is required")
        words = self._prompt_words(body)
        options = _object(body, "options", 400)
        value = options.get("num_predict")
        if value is None or (_int(value) and value < 1):  # -1 / -2: until EOS / context full
            max_tokens = OLLAMA_DEFAULT_NUM_PREDICT
        elif not _int(value):
            raise ApiError(400, 'option "num_predict" must be of type integer')
        else:
            max_tokens = value
        return SimRequest(words, max_tokens, _bool(body, "stream", True, 400), model)

    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        raise NotImplementedError

    def error_body(self, status: int, message: str, type_: str) -> bytes:
        return orjson.dumps({"error": message})

    def _line(self, s: StreamState, created_at: str, text: str) -> dict[str, Any]:
        raise NotImplementedError

    def tokens(self, s: StreamState, start: int, n: int, final: bool) -> list[Event]:
        created_at = _created_at()
        dumps = orjson.dumps
        off = s.vocab_offset
        return [
            (dumps(self._line(s, created_at, _VOCAB[(off + i) % len(_VOCAB)])) + b"\n", 1)
            for i in range(start, start + n)
        ]

    def _final(self, s: StreamState, text: str, generated: int) -> bytes:
        obj = self._line(s, _created_at(), text)
        obj["done_reason"] = "length"
        obj["done"] = True
        now = time.monotonic()
        first = s.first_step if s.first_step is not None else now
        obj["total_duration"] = int((now - s.arrival) * 1e9)
        obj["load_duration"] = 0
        evaluated = s.prompt_tokens - s.cached_tokens
        if evaluated > 0:
            obj["prompt_eval_count"] = evaluated
        obj["prompt_eval_duration"] = int((first - s.arrival) * 1e9)
        obj["eval_count"] = generated
        obj["eval_duration"] = int((now - first) * 1e9)
        return orjson.dumps(obj)

    def end(self, s: StreamState, generated: int) -> bytes:
        return self._final(s, "", generated) + b"\n"

    def error_event(self) -> bytes:
        return (
            b'{"error":"an error was encountered while running the model: simulated mid-stream failure '
            b'(loadgen sim fault injection)"}\n'
        )

    def full(self, s: StreamState, generated: int) -> bytes:
        return self._final(s, token_text(s.vocab_offset, 0, generated), generated)


class OllamaChat(_Ollama):
    cut_marker = b'"message":{'

    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        return _message_words(body.get("messages"), 400, content_types="str")

    def _line(self, s: StreamState, created_at: str, text: str) -> dict[str, Any]:
        return {
            "model": s.req.model,
            "created_at": created_at,
            "message": {"role": "assistant", "content": text},
            "done": False,
        }


class OllamaGenerate(_Ollama):
    cut_marker = b'"response":'

    def _prompt_words(self, body: dict[str, Any]) -> list[str]:
        words: list[str] = []
        for key in ("system", "prompt"):
            value = body.get(key)
            if value is None:
                continue
            if not isinstance(value, str):
                raise ApiError(400, f"'{key}' must be a string")
            words.extend(value.split())
        return words

    def _line(self, s: StreamState, created_at: str, text: str) -> dict[str, Any]:
        return {"model": s.req.model, "created_at": created_at, "response": text, "done": False}
