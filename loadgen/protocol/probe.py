"""Ask a server what it is: which family of inference server answers at a URL, the dialect to speak to it, the
models it serves and their context length. What `loadgen init URL` writes a starter scenario from.

Bounded by design: at most six GETs (`MAX_PROBES`), each with a short timeout, and none once the server is known.
The order:

- `GET /v1/models`: vLLM, SGLang, llama.cpp, TensorRT-LLM, TGI, Ollama, loadgen's simulator, hosted APIs. The
  models, and `owned_by` names the server where it sets it (`vllm`, `sglang`, `llamacpp`, `tensorrt_llm`,
  `loadgen-sim`); vLLM and SGLang add `max_model_len`; TGI puts its model id there.
- `GET /version`: vLLM (and the simulator): `{"version"}`, for the summary only; alone it identifies nothing.
- `GET /props`: llama.cpp: the context per slot (`default_generation_settings.n_ctx`).
- `GET /info`: TGI: `model_id`, `max_total_tokens`, `version`.
- `GET /api/tags`, `GET /api/version`: Ollama: `{"models": [{"name"}]}`, `{"version"}`.

A first request that gets no answer (refused, unresolvable, timed out) ends the probe at once: every other path
would fare the same. So does a 401 / 403 (the key is missing or refused). Only `owned_by` values a server is known
to set for itself identify it: OpenAI's own API answers `openai` / `system` there, Ollama the model's namespace.
An OpenAI-compatible listing from no known family is `openai-compatible` (LightLLM, LM Studio, gateways, hosted
APIs): `openai-chat` works there.

The API key, when given, goes in the `Authorization` header and nowhere else: no message here quotes a header.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = [
    "FAMILIES",
    "MAX_PROBES",
    "Family",
    "ProbeError",
    "Reply",
    "ServerInfo",
    "http_fetch",
    "identify",
    "probe_server",
]

MAX_PROBES = 6
PROBE_TIMEOUT_S = 3.0


@dataclass(frozen=True, slots=True)
class Family:
    """A family of inference servers and how loadgen talks to it best."""

    key: str
    title: str
    dialect: str
    # The server sends cumulative usage in every chunk when asked (stream_options.continuous_usage_stats).
    continuous_usage: bool = False
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    # Other dialects the server speaks, for the starter's comment.
    also: str = ""


FAMILIES: dict[str, Family] = {
    f.key: f
    for f in (
        Family("vllm", "vLLM", "openai-chat", True, also="openai-completions, openai-responses"),
        Family("sglang", "SGLang", "openai-chat", True, also="openai-completions"),
        # timings_per_token: a cumulative token count in every chunk (llama.cpp has no continuous usage).
        Family(
            "llamacpp",
            "llama.cpp",
            "openai-chat",
            False,
            {"timings_per_token": True},
            "openai-completions, openai-responses, llamacpp, anthropic-messages",
        ),
        Family("tensorrt-llm", "TensorRT-LLM (trtllm-serve)", "openai-chat", True, also="openai-completions"),
        # TGI's own route: its Messages API (openai-chat) needs a chat template and cannot ask for exact lengths.
        Family("tgi", "Text Generation Inference", "tgi", also="openai-chat (its Messages API)"),
        Family("ollama", "Ollama", "ollama-chat", also="ollama-generate, openai-chat (its /v1 routes)"),
        Family(
            "loadgen-sim",
            "loadgen's simulator",
            "openai-chat",
            True,
            also="openai-completions, openai-responses, anthropic-messages, tgi, ollama-chat",
        ),
        Family("openai-compatible", "an OpenAI-compatible server", "openai-chat", also="openai-completions"),
    )
}

# `owned_by` values that name the server itself (each from the server's source: vLLM's and SGLang's ModelCard
# defaults, llama.cpp's server context, TensorRT-LLM's ModelCard, the simulator's /v1/models).
_OWNED_BY = {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp", "tensorrt_llm": "tensorrt-llm"}
_OWNED_BY["loadgen-sim"] = "loadgen-sim"


@dataclass(frozen=True, slots=True)
class Reply:
    """One probe's answer: the HTTP status and the JSON body (None: not JSON), or `error` when no answer came."""

    status: int = 0
    body: Any = None
    error: str | None = None


Fetch = Callable[[str], Reply]


class ProbeError(Exception):
    """No inference server could be identified; the message names the URL and what was tried (exit 2)."""


@dataclass(slots=True)
class ServerInfo:
    """What the probe found."""

    base_url: str
    family: Family
    models: list[str]
    # Tokens of context per sequence (prompt + output), when the server says.
    context_tokens: int | None = None
    version: str | None = None
    # "GET /v1/models → 200", one per request made: what the summary and the starter's comment show.
    tried: list[str] = field(default_factory=list)


def _json(raw: bytes) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def http_fetch(base_url: str, api_key: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> Fetch:
    """A `Fetch` that GETs `base_url + path`, reading at most 1 MiB of the reply."""

    def fetch(path: str) -> Reply:
        req = urllib.request.Request(base_url + path, headers={"Accept": "application/json"})
        if api_key:
            req.add_header("Authorization", f"Bearer {api_key}")
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 (the user's own URL)
                return Reply(r.status, _json(r.read(1 << 20)))
        except urllib.error.HTTPError as e:
            return Reply(e.code, _json(e.read(1 << 16)))
        except TimeoutError:
            return Reply(error=f"no answer in {timeout:g} s")
        except urllib.error.URLError as e:
            reason = e.reason
            if isinstance(reason, TimeoutError):  # the connection itself timed out
                return Reply(error=f"no answer in {timeout:g} s")
            return Reply(error=getattr(reason, "strerror", None) or str(reason))
        except (OSError, ValueError) as e:  # reset mid-reply, a malformed status line, a bad URL
            return Reply(error=str(e) or type(e).__name__)

    return fetch


def _as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class _Probe:
    """One probe run: the requests made so far (each path at most once) and their summary lines."""

    def __init__(self, fetch: Fetch, base_url: str) -> None:
        self.fetch, self.base_url = fetch, base_url
        self.replies: dict[str, Reply] = {}
        self.tried: list[str] = []

    def get(self, path: str) -> Reply:
        if path in self.replies:
            return self.replies[path]
        if len(self.replies) >= MAX_PROBES:
            return Reply(error="not asked (probe budget spent)")
        reply = self.fetch(path)
        self.replies[path] = reply
        self.tried.append(f"GET {path} → {reply.error or reply.status}")
        if reply.error is not None and len(self.replies) == 1:
            raise ProbeError(f"{self.base_url}: cannot reach the server ({reply.error}); tried GET {path}")
        if reply.status in (401, 403):
            raise ProbeError(
                f"{self.base_url}: GET {path} answered {reply.status}: the server wants an API key "
                "(--api-key-env NAME: the environment variable holding it) or refused the one given"
            )
        return reply

    def json_object(self, path: str) -> dict[str, Any] | None:
        reply = self.get(path)
        return reply.body if reply.status == 200 and isinstance(reply.body, dict) else None


def _openai_listing(body: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    data = body.get("data") if body is not None else None
    if not isinstance(data, list):
        return None
    return [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]


def _ollama_names(body: dict[str, Any] | None) -> list[str] | None:
    models = body.get("models") if body is not None else None
    if not isinstance(models, list):
        return None
    return [m["name"] for m in models if isinstance(m, dict) and isinstance(m.get("name"), str)]


def _llamacpp_context(props: dict[str, Any] | None) -> int | None:
    settings = props.get("default_generation_settings") if props is not None else None
    return _as_int(settings.get("n_ctx")) if isinstance(settings, dict) else None


def _tgi_info(body: dict[str, Any] | None) -> dict[str, Any] | None:
    if body is not None and isinstance(body.get("model_id"), str) and "max_total_tokens" in body:
        return body
    return None


def identify(fetch: Fetch, base_url: str) -> ServerInfo:
    """Probe through `fetch` and name the server at `base_url`; `ProbeError` when nothing there is an LLM server."""
    p = _Probe(fetch, base_url)
    listing = _openai_listing(p.json_object("/v1/models"))
    if listing is not None:
        ids = [m["id"] for m in listing]
        owners = {m.get("owned_by") for m in listing}
        known = {_OWNED_BY[o] for o in owners if isinstance(o, str) and o in _OWNED_BY}
        key = known.pop() if len(known) == 1 else None
        context = next((c for c in (_as_int(m.get("max_model_len")) for m in listing) if c), None)
        info = ServerInfo(base_url, FAMILIES["openai-compatible"], ids, context)
        if key in ("vllm", "loadgen-sim"):
            version = p.json_object("/version")
            info.version = str(version["version"]) if version and "version" in version else None
        elif key == "llamacpp":
            info.context_tokens = _llamacpp_context(p.json_object("/props")) or info.context_tokens
            meta = listing[0].get("meta") if listing else None
            if info.context_tokens is None and isinstance(meta, dict):
                info.context_tokens = _as_int(meta.get("n_ctx"))
        elif key is None:
            # TGI lists its model id as the owner; Ollama a namespace (`library`); others say nothing we know.
            tgi = _tgi_info(p.json_object("/info"))
            if tgi is not None:
                return _tgi(base_url, tgi, p)
            names = _ollama_names(p.json_object("/api/tags"))
            if names is not None:
                return _ollama(base_url, names, p)
        if key is not None:
            info.family = FAMILIES[key]
        info.tried = p.tried
        return info
    tgi = _tgi_info(p.json_object("/info"))
    if tgi is not None:
        return _tgi(base_url, tgi, p)
    names = _ollama_names(p.json_object("/api/tags"))
    if names is not None:
        return _ollama(base_url, names, p)
    raise ProbeError(
        f"{base_url}: no LLM inference server recognised there; tried {', '.join(p.tried)} "
        "(expected an OpenAI-compatible /v1/models, TGI's /info or Ollama's /api/tags)"
    )


def _tgi(base_url: str, info: dict[str, Any], p: _Probe) -> ServerInfo:
    version = info.get("version")
    return ServerInfo(
        base_url,
        FAMILIES["tgi"],
        [info["model_id"]],
        _as_int(info.get("max_total_tokens")),
        str(version) if version is not None else None,
        p.tried,
    )


def _ollama(base_url: str, names: list[str], p: _Probe) -> ServerInfo:
    version = p.json_object("/api/version")
    found = str(version["version"]) if version and "version" in version else None
    return ServerInfo(base_url, FAMILIES["ollama"], names, None, found, p.tried)


def probe_server(base_url: str, api_key: str | None = None, timeout: float = PROBE_TIMEOUT_S) -> ServerInfo:
    """`identify` over HTTP."""
    return identify(http_fetch(base_url, api_key, timeout), base_url)
