"""The canaries (tests/integration/canaries.py) through the commands that ask a server before any load: `loadgen
init` probing a server that quotes the key it got (in its version, a model's name, a 401), `loadgen validate` whose
tokenizer check meets a 401 quoting every credential, and `loadgen run` refused by a Prometheus that answers 401
quoting its credentials (in the body, a header and the status line). Each command's stdout, stderr and files are
grepped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from tests.serving import threaded_http

from .canaries import (
    ENV,
    KEY,
    PROM_BASIC,
    PROM_BEARER,
    all_bytes,
    canary_scenario,
    echoing_server,
    leaks,
    prometheus,
    quoted,
    send_reply,
)


def _cli(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen.cli", *argv],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, **ENV},
        cwd=cwd,
    )


@contextmanager
def _quoting_vllm(where: str) -> Iterator[str]:
    """A vLLM-like server that quotes the Authorization header it got: in its /version (``where`` = "version"), in
    the name of a second model ("models"), or in a 401 to everything ("401")."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server API
            echo = quoted(self.headers)
            if where == "401":
                body = json.dumps({"error": {"message": f"Incorrect API key provided: {echo}"}}).encode()
                return send_reply(self, 401, "application/json", body, echo)
            if self.path == "/v1/models":
                models = [{"id": "m", "owned_by": "vllm", "max_model_len": 4096}]
                if where == "models":
                    models.append({"id": f"m-{echo}", "owned_by": "vllm"})
                doc: dict[str, object] = {"object": "list", "data": models}
            elif self.path == "/version":
                doc = {"version": f"0.9.0 (for {echo})"}
            else:
                return send_reply(self, 404, "application/json", b"{}")
            send_reply(self, 200, "application/json", json.dumps(doc).encode())

        def log_message(self, *args: object) -> None:
            pass

    with threaded_http(Handler) as srv:
        yield f"http://127.0.0.1:{srv.server_address[1]}"


@pytest.mark.parametrize(("where", "code"), [("version", 0), ("models", 2), ("401", 2)])
def test_init_never_repeats_the_key_a_server_quotes(tmp_path: Path, where: str, code: int) -> None:
    with _quoting_vllm(where) as url:
        r = _cli("init", url, "--api-key-env", "LG_CANARY_KEY", "--out", "s.yaml", cwd=tmp_path)
    assert r.returncode == code, r.stdout + r.stderr
    said = {"version": "found vLLM 0.9.0", "models": "pick one with --model", "401": "wants an API key"}[where]
    assert said in r.stdout + r.stderr
    if code == 0:
        assert "api_key_env: LG_CANARY_KEY" in (tmp_path / "s.yaml").read_text()
    assert leaks(r.stdout + r.stderr) == [] and leaks(all_bytes(tmp_path)) == []


def test_init_refuses_credentials_in_the_url_without_repeating_them(tmp_path: Path) -> None:
    r = _cli("init", f"http://user:{KEY}@127.0.0.1:9", cwd=tmp_path)
    assert r.returncode == 2 and "--api-key-env" in r.stderr
    assert leaks(r.stdout + r.stderr) == []


def test_validate_asking_the_server_never_repeats_what_it_quotes(tmp_path: Path) -> None:
    # `tokenizer: server`: the check POSTs /tokenize to the first variant with its credentials; the server's 401
    # quotes them all.
    with echoing_server() as (server, seen), prometheus() as (prom, _):
        scenario = canary_scenario(tmp_path / "s.yaml", server, prom, "2s", PROM_BASIC, tokenizer="server")
        r = _cli("validate", str(scenario), cwd=tmp_path)
    assert seen.requests and r.returncode == 2 and "tokenizer" in r.stderr, r.stdout + r.stderr
    assert leaks(r.stdout + r.stderr) == []


@pytest.mark.parametrize("auth", [PROM_BASIC, PROM_BEARER], ids=["basic", "bearer"])
def test_a_run_refused_by_prometheus_never_repeats_its_credentials(tmp_path: Path, auth: dict[str, object]) -> None:
    # Every query answered 401 with the credentials quoted in a plain-text body, a header and the status line: the
    # run stops before any load (exit 2), naming the field.
    with echoing_server() as (server, seen), prometheus(refuse_all=True) as (prom, prom_seen):
        scenario = canary_scenario(tmp_path / "s.yaml", server, prom, "2s", auth)
        r = _cli("run", str(scenario), "--workers", "0", cwd=tmp_path)
    assert r.returncode == 2 and "metrics.prometheus" in r.stderr, r.stdout + r.stderr
    assert prom_seen.requests and not seen.requests
    assert leaks(r.stdout + r.stderr) == [] and leaks(all_bytes(tmp_path)) == []
