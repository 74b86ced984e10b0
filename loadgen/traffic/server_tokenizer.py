"""`tokenizer: server`: the target's own `/tokenize` endpoint as the prompt tokenizer, for a model whose tokenizer
file is not at hand.

Both servers that have one take one body: llama.cpp's `POST /tokenize {"content": ...}` → `{"tokens": [...]}` and
vLLM's `POST /tokenize {"model": ..., "prompt": ...}` → `{"count", "tokens": [...]}` (each ignores the other's
keys), with special tokens off (`add_special` / `add_special_tokens: false`) so that a count is the text's own, as
the local tokenizer's `encode` is.

Everything is asked when the scenario is validated, never per request: the sampler needs the one-token words of
its pool (`one_token_words`: each of loadgen's ~500 prompt words alone and after a space, ~1,000 small requests,
about a second on loopback, plus one long probe that no token spans the spaces), the counts of its system prompts
and documents (a few hundred more, once), and the chat template overhead: from llama.cpp's `/apply-template`, or
vLLM's `/tokenize` with `messages` (it applies the chat template as a chat request does); a server with neither
leaves it unknown (None, and the report says the overhead is not accounted for). Answers are kept,
so each text is asked once per process.

The scenario's tokenizer is one for all variants: `server` asks the first variant's endpoint, so every variant
must serve the same model (as for a tokenizer file). A server without `/tokenize`, or one that cannot be reached,
is a configuration error (exit 2 before any load) naming `tokenizer` and the URL.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from loadgen.traffic.tokenizer import (
    SERVER_TOKENIZER,
    PromptTokenizer,
    TokenizerError,
    load_tokenizer,
    use_server_tokenizer,
)

__all__ = ["ServerTokenizer", "TokenizerError", "check_tokenizer", "server_tokenizer"]

_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True, eq=False)
class ServerTokenizer(PromptTokenizer):
    """A `PromptTokenizer` whose counts come from the target's `/tokenize` (`source` is its base URL)."""

    model: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    _ids: dict[str, list[int]] = field(default_factory=dict)

    def encode(self, text: str) -> list[int]:
        found = self._ids.get(text)
        if found is None:
            body = {"content": text, "add_special": False, "model": self.model, "prompt": text}
            body["add_special_tokens"] = False
            reply = self._post("/tokenize", body)
            tokens = reply.get("tokens") if isinstance(reply, dict) else None
            if not isinstance(tokens, list):
                raise TokenizerError(f"tokenizer: server: {self.source}/tokenize answered without a tokens list")
            # llama.cpp gives {"id", "piece"} objects when asked for pieces; plain ids otherwise.
            found = [t["id"] if isinstance(t, dict) else int(t) for t in tokens]
            self._ids[text] = found
        return found

    def token_ends(self, text: str) -> list[int]:
        raise TokenizerError("tokenizer: server gives token counts, not offsets: per-chunk counts need a local file")

    def _measure_overhead(self, system: bool) -> int | None:
        found: set[int] = set()
        for text in ("hello", "apple banana cherry"):
            messages = [{"role": "system", "content": text}] if system else []
            messages.append({"role": "user", "content": text})
            try:
                rendered = self._post("/apply-template", {"messages": messages})
            except TokenizerError:
                rendered = None
            prompt = rendered.get("prompt") if isinstance(rendered, dict) else None
            if isinstance(prompt, str):
                # llama.cpp: the server tokenizes a chat prompt with its special tokens (BOS where the model has one).
                body: dict[str, Any] = {"content": prompt, "add_special": True, "model": self.model, "prompt": prompt}
            else:
                # vLLM: /tokenize takes the messages and applies the model's chat template itself, as its
                # /v1/chat/completions does (its `add_generation_prompt` as a chat request's).
                body = {"model": self.model, "messages": messages, "add_generation_prompt": True}
            try:
                tokens = self._post("/tokenize", body).get("tokens")
            except (TokenizerError, AttributeError):
                return None  # neither: the overhead is unknown (and the report says so)
            if not isinstance(tokens, list):
                return None
            found.add(len(tokens) - self.count(text) * len(messages))
        return found.pop() if len(found) == 1 else None

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        url = self.source + path
        request = urllib.request.Request(
            url, orjson.dumps(body), headers={"Content-Type": "application/json", **self.headers}
        )
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as reply:
                return orjson.loads(reply.read())
        except urllib.error.HTTPError as exc:
            hint = " (the server has no such endpoint: give a tokenizer file instead)" if exc.code == 404 else ""
            raise TokenizerError(f"tokenizer: server: POST {url} answered {exc.code}{hint}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TokenizerError(f"tokenizer: server: cannot reach {url}: {reason}") from None
        except orjson.JSONDecodeError:
            raise TokenizerError(f"tokenizer: server: POST {url} did not answer JSON") from None


_SERVERS: dict[tuple[str, str], ServerTokenizer] = {}


def server_tokenizer(base_url: str, model: str, headers: dict[str, str] | None = None) -> ServerTokenizer:
    """The tokenizer of the server at `base_url` (serving `model`), checked: its one-token words found (raises
    `TokenizerError` naming `tokenizer` and the URL when it has no `/tokenize` or cannot be reached). Kept per
    process, and what `load_tokenizer("server")` returns from then on (the sampler's)."""
    key = (base_url.rstrip("/"), model)
    found = _SERVERS.get(key)
    if found is None:
        found = ServerTokenizer(key[0], "server", None, False, None, None, model=model, headers=dict(headers or {}))
        found.one_token_words()
        _SERVERS[key] = found
    use_server_tokenizer(found)
    return found


def check_tokenizer(value: str, variants: Sequence[Any]) -> bool:
    """The scenario's check of its `tokenizer` (raises `TokenizerError`): a file loaded (once per process) and able
    to cut prompts exactly, or `server` resolved against the first variant, whose headers and API key go with the
    requests as with its completions. True once checked."""
    if value != SERVER_TOKENIZER:
        load_tokenizer(value).one_token_words()
    elif variants:
        v = variants[0]
        server_tokenizer(v.base_url, v.model, {**v.headers, **v.credential_headers()})
    return True
