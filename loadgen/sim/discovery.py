"""The discovery routes of a simulated variant: what each emulated server answers when asked what it is.

Every variant serves the OpenAI, TGI and Ollama framings, so it answers each family's `GET` of itself, in that
family's shape (`/v1/models` is the server module's own, with `owned_by: loadgen-sim`):

| `GET` | family | body |
|---|---|---|
| `/version` | vLLM | `{"version"}` |
| `/info` | TGI | `{"model_id", "max_input_tokens", "max_total_tokens", "router", "version", ...}` |
| `/api/tags` | Ollama | `{"models": [{"name", "model", "details", ...}]}` |
| `/api/version` | Ollama | `{"version"}` |

The model is the variant's name (as in `/v1/models`), its context the profile's KV-cache capacity. `loadgen init`
reads these (`loadgen.protocol.probe`); `/v1/models`' owner tells it that this is the simulator.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

import orjson

from loadgen.sim.profiles import SimProfile

__all__ = ["DISCOVERY_PATHS", "discovery_body"]

DISCOVERY_PATHS = ("/version", "/info", "/api/tags", "/api/version")


def _version() -> str:
    try:
        return version("llm-loadgen")
    except PackageNotFoundError:
        return "0+unknown"


def discovery_body(path: str, name: str, profile: SimProfile) -> bytes | None:
    """The JSON body of discovery route `path` for variant `name`, or None when `path` is not one."""
    if path in ("/version", "/api/version"):
        return orjson.dumps({"version": _version()})
    if path == "/info":
        return orjson.dumps(
            {
                "model_id": name,
                "model_sha": None,
                "model_pipeline_tag": "text-generation",
                "max_concurrent_requests": profile.max_num_seqs,
                "max_best_of": 1,
                "max_stop_sequences": 4,
                "max_input_tokens": profile.kv_cache_tokens - 1,
                "max_total_tokens": profile.kv_cache_tokens,
                "validation_workers": 1,
                "max_client_batch_size": 1,
                "router": "loadgen-sim",
                "version": _version(),
                "sha": None,
                "docker_label": None,
            }
        )
    if path == "/api/tags":
        details = {"format": "sim", "family": "loadgen-sim", "parameter_size": "", "quantization_level": ""}
        model = {"name": name, "model": name, "modified_at": "", "size": 0, "digest": "", "details": details}
        return orjson.dumps({"models": [model]})
    return None
