"""`loadgen init URL`: the command over real HTTP against small fakes of the servers' discovery routes, and the
starter it writes for each family (what `loadgen validate` accepts, with the family's dialect and fields)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.cli import main
from loadgen.cli.init import _q, fitted_chat, normalize_url, starter_scenario
from loadgen.config.scenario import load_scenario
from loadgen.protocol.probe import identify
from tests.unit.test_probe import LLAMACPP, OLLAMA, SGLANG, TGI, TRTLLM, VLLM, FakeServer, _listing

SECRET = "sk-test-0123456789abcdef"


class _Fake:
    """A loopback HTTP server answering GETs from a table; records each request's Authorization header."""

    def __init__(self, routes: dict[str, Any], hang: bool = False) -> None:
        self.routes, self.hang = routes, hang
        self.auth: list[str | None] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                fake.auth.append(self.headers.get("Authorization"))
                if fake.hang:
                    time.sleep(5)
                    return  # the client gave up long ago: no answer (writing one would only hit a closed socket)
                body = fake.routes.get(self.path)
                data = json.dumps(body if body is not None else {"detail": "Not Found"}).encode()
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake_vllm() -> Iterator[_Fake]:
    fake = _Fake(VLLM)
    yield fake
    fake.close()


def test_init_writes_a_starter_that_validates(
    fake_vllm: _Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.yaml"
    assert main(["init", fake_vllm.url + "/v1/", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"found vLLM 0.6.4.post1 at {fake_vllm.url}" in printed
    text = out.read_text()
    assert text.splitlines()[0] == "# yaml-language-server: $schema=scenario.schema.json"
    schema = out.parent / "scenario.schema.json"
    assert schema.read_text() == files("loadgen").joinpath("config/scenario.schema.json").read_text()
    sc = load_scenario(out)
    (v,) = sc.variants
    assert (v.base_url, v.model, v.dialect) == (fake_vllm.url, "meta-llama/Llama-3.1-8B-Instruct", "openai-chat")
    assert v.continuous_usage_stats is True
    assert [m.name for m in sc.traffic.mixes] == ["chat"]  # 8192 tokens of context: chat fits as it is
    assert [s.metric for s in sc.slos] == ["success_rate"]
    assert main(["validate", str(out)]) == 0


def test_an_existing_file_is_kept_unless_forced(
    fake_vllm: _Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "s.yaml"
    out.write_text("mine\n")
    assert main(["init", fake_vllm.url, "--out", str(out)]) == 2
    assert "exists; --force" in capsys.readouterr().err
    assert out.read_text() == "mine\n"
    assert fake_vllm.auth == []  # refused before any request
    assert main(["init", fake_vllm.url, "--out", str(out), "--force"]) == 0
    assert load_scenario(out).variants[0].model == "meta-llama/Llama-3.1-8B-Instruct"


def test_the_key_is_sent_and_named_never_written_or_printed(
    fake_vllm: _Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_GPU_KEY", SECRET)
    out = tmp_path / "s.yaml"
    assert main(["init", fake_vllm.url, "--out", str(out), "--api-key-env", "MY_GPU_KEY"]) == 0
    assert fake_vllm.auth and set(fake_vllm.auth) == {f"Bearer {SECRET}"}
    captured = capsys.readouterr()
    text = out.read_text()
    assert SECRET not in captured.out + captured.err + text
    assert load_scenario(out).variants[0].api_key_env == "MY_GPU_KEY"
    # A variable that is not set is a usage error naming it, before any request.
    monkeypatch.delenv("MY_GPU_KEY")
    assert main(["init", fake_vllm.url, "--out", str(tmp_path / "t.yaml"), "--api-key-env", "MY_GPU_KEY"]) == 2
    assert "MY_GPU_KEY is not set" in capsys.readouterr().err


def test_several_models_ask_for_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = [{"id": name, "object": "model", "owned_by": "vllm"} for name in ("small", "large")]
    fake = _Fake({"/v1/models": _listing(*models), "/version": {"version": "0.7.0"}})
    try:
        out = tmp_path / "s.yaml"
        assert main(["init", fake.url, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert "serves 2 models; pick one with --model" in err and "  small\n  large" in err
        assert not out.exists()
        assert main(["init", fake.url, "--out", str(out), "--model", "nope"]) == 2
        assert "'nope' is not among the models it serves: small, large" in capsys.readouterr().err
        assert main(["init", fake.url, "--out", str(out), "--model", "large"]) == 0
        assert load_scenario(out).variants[0].model == "large"
    finally:
        fake.close()


def test_unreachable_and_silent_servers_fail_fast_naming_the_url(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    assert main(["init", url, "--out", str(tmp_path / "a.yaml")]) == 2
    err = capsys.readouterr().err
    assert url in err and "cannot reach the server" in err and "tried GET /v1/models" in err
    hung = _Fake({}, hang=True)
    try:
        started = time.monotonic()
        assert main(["init", hung.url, "--out", str(tmp_path / "b.yaml"), "--timeout", "0.5"]) == 2
        assert time.monotonic() - started < 4  # one probe, stopped by its timeout (the server sleeps 5 s)
        err = capsys.readouterr().err
        assert hung.url in err and "no answer in 0.5 s" in err
    finally:
        hung.close()
    assert not (tmp_path / "a.yaml").exists() and not (tmp_path / "b.yaml").exists()


def test_a_web_server_that_is_no_llm_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = _Fake({"/": {"it": "works"}})
    try:
        assert main(["init", fake.url, "--out", str(tmp_path / "s.yaml")]) == 2
        err = capsys.readouterr().err
        assert fake.url in err and "no LLM inference server" in err and "GET /api/tags → 404" in err
    finally:
        fake.close()


@pytest.mark.parametrize(
    ("routes", "dialect", "continuous", "extra"),
    [
        (VLLM, "openai-chat", True, {}),
        (SGLANG, "openai-chat", True, {}),
        (TRTLLM, "openai-chat", True, {}),
        (TGI, "tgi", False, {}),
        (OLLAMA, "ollama-chat", False, {}),
        (LLAMACPP, "openai-chat", False, {"timings_per_token": True}),
    ],
    ids=["vllm", "sglang", "trtllm", "tgi", "ollama", "llamacpp"],
)
def test_each_familys_starter_validates_with_its_dialect(
    routes: dict[str, Any], dialect: str, continuous: bool, extra: dict[str, Any], tmp_path: Path
) -> None:
    info = identify(FakeServer(routes), "http://gpu-1:8000")
    (model,) = info.models
    path = tmp_path / "s.yaml"
    path.write_text(starter_scenario(info, model, info.family.dialect, "SERVER_KEY"))
    sc = load_scenario(path)
    (v,) = sc.variants
    assert (v.dialect, v.model, v.continuous_usage_stats, v.api_key_env) == (dialect, model, continuous, "SERVER_KEY")
    doc = yaml.safe_load(path.read_text())
    assert doc["variants"][0].get("extra_body", {}) == extra
    mix = doc["traffic"]
    if info.context_tokens is not None and info.context_tokens < 5000:  # TGI's 4096, llama.cpp's 2048
        assert mix["mixes"] == [{"name": "chat-fit", "weight": 1}]
        fitted = mix["custom_mixes"]["chat-fit"]
        longest = max(b["prompt_tokens"][1] for b in fitted["buckets"]) + fitted["output_tokens"][1]
        assert longest <= 0.8 * info.context_tokens
    else:
        assert mix == {"mixes": [{"name": "chat", "weight": 1}]}


def test_fitted_chat_keeps_chat_where_it_fits_and_refuses_a_tiny_context() -> None:
    assert fitted_chat(None) is None and fitted_chat(8192) is None
    small = fitted_chat(512)
    assert small is not None
    assert [b["name"] for b in small["buckets"]] == ["short", "medium"]
    assert max(b["prompt_tokens"][1] for b in small["buckets"]) + small["output_tokens"][1] <= 0.8 * 512
    with pytest.raises(ValueError, match="too short"):
        fitted_chat(64)


def test_normalize_url() -> None:
    assert normalize_url("127.0.0.1:8000") == "http://127.0.0.1:8000"
    assert normalize_url("https://api.example.com/v1/") == "https://api.example.com"
    assert normalize_url("http://gpu-1:8000/v1/chat/completions") == "http://gpu-1:8000"
    assert normalize_url("http://gw.example.com/team-a/v1/models") == "http://gw.example.com/team-a"
    with pytest.raises(ValueError, match="not an http"):
        normalize_url("ftp://host")
    with pytest.raises(ValueError, match="--api-key-env") as refused:
        normalize_url("https://user:sk-secret-0123@api.example.com")
    assert "sk-secret" not in str(refused.value)


def test_a_dialect_given_is_written_and_said_to_be_given(fake_vllm: _Fake, tmp_path: Path) -> None:
    out = tmp_path / "s.yaml"
    assert main(["init", fake_vllm.url, "--out", str(out), "--dialect", "openai-completions", "--name", "gpu-1"]) == 0
    text = out.read_text()
    assert "# Given with --dialect (vLLM found; loadgen would pick openai-chat)." in text
    (v,) = load_scenario(out).variants
    assert (v.name, v.dialect) == ("gpu-1", "openai-completions")
    with pytest.raises(SystemExit) as e:
        main(["init", fake_vllm.url, "--out", str(tmp_path / "t.yaml"), "--name", "two words"])
    assert e.value.code == 2


@pytest.mark.parametrize(
    "value",
    ["baseline", "http://gpu-1:8000", "llama3.2:latest", ".cache/m.gguf", "true", "null", "1e3", "12", "a: b", "x #y",
     "", " x", "a,b", "{x}", "it's"],
)  # fmt: skip
def test_written_scalars_read_back_as_the_same_string(value: str) -> None:
    # Model ids, URLs and names go into the starter as written by _q: plain where YAML reads them back unchanged.
    assert yaml.safe_load(f"k: {_q(value)}") == {"k": value}
    assert yaml.safe_load(f"{{k: {_q(value)}}}") == {"k": value}
    if value in ("baseline", "http://gpu-1:8000", "llama3.2:latest"):
        assert _q(value) == value
