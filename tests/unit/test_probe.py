"""`loadgen.protocol.probe`: which server family, dialect, models and context each server's discovery answers give.

The fakes answer what each server's source answers (vLLM's and SGLang's ModelCard, TGI's router `/info` and
`/v1/models`, Ollama's `/api/tags`, TensorRT-LLM's ModelCard); llama.cpp's are recorded from the llama-server the
e2e tier runs. Every fake counts the requests it got: the probe is bounded.
"""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.protocol.probe import FAMILIES, MAX_PROBES, ProbeError, Reply, ServerInfo, identify

URL = "http://gpu-1:8000"
_404 = Reply(404, {"detail": "Not Found"})


class FakeServer:
    """A `Fetch` over a table of path → (status, body); unknown paths answer 404. Records the paths asked."""

    def __init__(self, routes: dict[str, Any]) -> None:
        self.routes = routes
        self.asked: list[str] = []

    def __call__(self, path: str) -> Reply:
        self.asked.append(path)
        found = self.routes.get(path)
        if found is None:
            return _404
        return found if isinstance(found, Reply) else Reply(200, found)


def _listing(*models: dict[str, Any]) -> dict[str, Any]:
    return {"object": "list", "data": list(models)}


VLLM = {
    "/v1/models": _listing(
        {
            "id": "meta-llama/Llama-3.1-8B-Instruct",
            "object": "model",
            "created": 1733000000,
            "owned_by": "vllm",
            "root": "/models/llama-3.1-8b",
            "parent": None,
            "max_model_len": 8192,
            "permission": [{"id": "modelperm-1", "object": "model_permission", "allow_sampling": True}],
        }
    ),
    "/version": {"version": "0.6.4.post1"},
}
SGLANG = {
    "/v1/models": _listing(
        {
            "id": "Qwen/Qwen2.5-7B-Instruct",
            "object": "model",
            "created": 1733000000,
            "owned_by": "sglang",
            "root": "Qwen/Qwen2.5-7B-Instruct",
            "max_model_len": 32768,
        }
    ),
    "/get_model_info": {"model_path": "Qwen/Qwen2.5-7B-Instruct", "is_generation": True},
}
TGI_INFO = {
    "model_id": "HuggingFaceH4/zephyr-7b-beta",
    "model_sha": "b70e0c9a2d9e14bd1e812d3c398e5f313e93b473",
    "model_pipeline_tag": "text-generation",
    "max_concurrent_requests": 128,
    "max_best_of": 2,
    "max_stop_sequences": 4,
    "max_input_tokens": 4095,
    "max_total_tokens": 4096,
    "validation_workers": 2,
    "max_client_batch_size": 4,
    "router": "text-generation-router",
    "version": "3.0.1",
    "sha": None,
    "docker_label": None,
}
TGI = {
    # TGI's router: the model id is also the owner, created 0.
    "/v1/models": _listing(
        {"id": TGI_INFO["model_id"], "object": "model", "created": 0, "owned_by": TGI_INFO["model_id"]}
    ),
    "/info": TGI_INFO,
}
OLLAMA_TAGS = {
    "models": [
        {
            "name": "llama3.2:latest",
            "model": "llama3.2:latest",
            "modified_at": "2025-01-10T10:00:00.0+00:00",
            "size": 2019393189,
            "digest": "a80c4f17acd5",
            "details": {"format": "gguf", "family": "llama", "parameter_size": "3.2B", "quantization_level": "Q4_K_M"},
        }
    ]
}
OLLAMA = {
    "/v1/models": _listing({"id": "llama3.2:latest", "object": "model", "created": 1736500000, "owned_by": "library"}),
    "/api/tags": OLLAMA_TAGS,
    "/api/version": {"version": "0.5.7"},
}
TRTLLM = {
    "/v1/models": _listing(
        {"id": "TinyLlama/TinyLlama-1.1B-Chat-v1.0", "object": "model", "created": 1733, "owned_by": "tensorrt_llm"}
    ),
}
LLAMACPP_ID = "models/SmolLM2-135M-Instruct.Q4_1.gguf"
LLAMACPP = {
    "/v1/models": {
        "models": [{"name": LLAMACPP_ID, "model": LLAMACPP_ID, "type": "model", "capabilities": ["completion"]}],
        "object": "list",
        "data": [
            {
                "id": LLAMACPP_ID,
                "aliases": [LLAMACPP_ID],
                "object": "model",
                "created": 1796307735,
                "owned_by": "llamacpp",
                "meta": {"vocab_type": 2, "n_vocab": 49152, "n_ctx": 2048, "n_ctx_train": 8192},
            }
        ],
    },
    "/props": {
        "default_generation_settings": {"params": {"n_predict": -1}, "n_ctx": 2048},
        "total_slots": 4,
        "model_path": LLAMACPP_ID,
        "build_info": "b0-unknown",
    },
}


def _identify(routes: dict[str, Any]) -> tuple[ServerInfo, FakeServer]:
    fake = FakeServer(routes)
    return identify(fake, URL), fake


@pytest.mark.parametrize(
    ("routes", "family", "dialect", "models", "context", "version"),
    [
        (VLLM, "vllm", "openai-chat", ["meta-llama/Llama-3.1-8B-Instruct"], 8192, "0.6.4.post1"),
        (SGLANG, "sglang", "openai-chat", ["Qwen/Qwen2.5-7B-Instruct"], 32768, None),
        (TGI, "tgi", "tgi", ["HuggingFaceH4/zephyr-7b-beta"], 4096, "3.0.1"),
        (OLLAMA, "ollama", "ollama-chat", ["llama3.2:latest"], None, "0.5.7"),
        (TRTLLM, "tensorrt-llm", "openai-chat", ["TinyLlama/TinyLlama-1.1B-Chat-v1.0"], None, None),
        (LLAMACPP, "llamacpp", "openai-chat", [LLAMACPP_ID], 2048, None),
    ],
    ids=["vllm", "sglang", "tgi", "ollama", "trtllm", "llamacpp"],
)
def test_each_family_is_told_apart(
    routes: dict[str, Any], family: str, dialect: str, models: list[str], context: int | None, version: str | None
) -> None:
    info, fake = _identify(routes)
    assert info.family.key == family
    assert info.family.dialect == dialect
    assert info.models == models
    assert info.context_tokens == context
    assert info.version == version
    assert info.base_url == URL
    assert fake.asked[0] == "/v1/models"
    assert len(fake.asked) <= 4, fake.asked
    assert info.tried == [f"GET {p} → {routes.get(p) and 200 or 404}" for p in fake.asked]


def test_servers_without_openai_listing_are_found_by_their_own_routes() -> None:
    # TGI before its /v1 routes, Ollama before its OpenAI compatibility.
    info, fake = _identify({"/info": TGI_INFO})
    assert (info.family.key, info.models, fake.asked) == ("tgi", [TGI_INFO["model_id"]], ["/v1/models", "/info"])
    info, fake = _identify({"/api/tags": OLLAMA_TAGS, "/api/version": {"version": "0.1.20"}})
    assert (info.family.key, info.models, info.version) == ("ollama", ["llama3.2:latest"], "0.1.20")
    assert fake.asked == ["/v1/models", "/info", "/api/tags", "/api/version"]


def test_known_families_stop_after_one_confirmation() -> None:
    for routes, asked in ((VLLM, ["/v1/models", "/version"]), (SGLANG, ["/v1/models"]), (TRTLLM, ["/v1/models"])):
        _, fake = _identify(routes)
        assert fake.asked == asked


def test_an_unknown_owner_is_an_openai_compatible_server() -> None:
    # OpenAI's own API: many models, owned by openai / system; nothing else answers.
    routes = {
        "/v1/models": _listing(
            {"id": "gpt-4o-mini", "object": "model", "created": 1721172741, "owned_by": "system"},
            {"id": "o3-mini", "object": "model", "created": 1737146383, "owned_by": "openai"},
        )
    }
    info, fake = _identify(routes)
    assert info.family is FAMILIES["openai-compatible"]
    assert info.models == ["gpt-4o-mini", "o3-mini"]
    assert fake.asked == ["/v1/models", "/info", "/api/tags"]


def test_a_server_that_is_no_llm_server_is_an_error_naming_url_and_paths() -> None:
    fake = FakeServer({"/": {"hello": "world"}})
    with pytest.raises(ProbeError) as e:
        identify(fake, URL)
    msg = str(e.value)
    assert msg.startswith(URL)
    for path in ("/v1/models", "/info", "/api/tags"):
        assert f"GET {path} → 404" in msg
    assert len(fake.asked) <= MAX_PROBES


def test_html_or_garbage_on_every_route_is_no_llm_server() -> None:
    fake = FakeServer({p: Reply(200, None) for p in ("/v1/models", "/info", "/api/tags", "/props", "/version")})
    with pytest.raises(ProbeError, match="no LLM inference server"):
        identify(fake, URL)


def test_unreachable_stops_at_the_first_request() -> None:
    fake = FakeServer({"/v1/models": Reply(error="Connection refused")})
    with pytest.raises(ProbeError, match=r"cannot reach the server \(Connection refused\); tried GET /v1/models"):
        identify(fake, URL)
    assert fake.asked == ["/v1/models"]


@pytest.mark.parametrize("status", [401, 403])
def test_a_refused_key_says_so(status: int) -> None:
    fake = FakeServer({"/v1/models": Reply(status, {"error": "invalid api key"})})
    with pytest.raises(ProbeError, match=f"answered {status}.*--api-key-env"):
        identify(fake, URL)
    assert fake.asked == ["/v1/models"]


def test_the_budget_is_never_exceeded() -> None:
    # An unknown owner and every family route timing out: the probe gives up within MAX_PROBES requests.
    routes: dict[str, Any] = {p: Reply(error="no answer in 3 s") for p in ("/info", "/api/tags", "/api/version")}
    routes["/v1/models"] = _listing({"id": "m", "object": "model", "owned_by": "someone"})
    info, fake = _identify(routes)
    assert info.family.key == "openai-compatible"
    assert len(fake.asked) <= MAX_PROBES
