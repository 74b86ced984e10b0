"""`loadgen k8s coldstart --url … --api-key-env …` against a loopback HTTP server that checks the bearer key: the
probe carries the key, an answer waiting cannot change (401, 404, 500) stops it at once, a stalled server times out,
and every path restores the replicas (the deployment lives in the fake API server). The key is never printed, even
when the server's error quotes it."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loadgen.cli import main
from tests.k8s.fake_api import fake_api
from tests.k8s.test_coldstart import ROLE, TOKEN, Deployment, _argv, _patches, _replicas

KEY = "SECRET-direct-key-0123456789"


class Server:
    """Answers a token to the right key; after the deployment is scaled down, ``after`` (an HTTP status, "stall")."""

    def __init__(self, dep: Deployment, after: int | str) -> None:
        self.dep, self.after = dep, after
        self.auth: list[str | None] = []


class Loopback:
    """The server's HTTP side on 127.0.0.1, which can go down and come back on the same port (a pod restarting)."""

    def __init__(self, server: Server) -> None:
        self.server, self.port = server, 0
        self.httpd: ThreadingHTTPServer | None = None

    def start(self) -> str:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", self.port), _handler(self.server))
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None


@contextmanager
def serve(server: Server) -> Iterator[str]:
    loop = Loopback(server)
    try:
        yield loop.start()
    finally:
        loop.stop()


def _handler(server: Server) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

        def do_POST(self) -> None:  # noqa: N802
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            auth = self.headers.get("Authorization")
            server.auth.append(auth)
            answer: int | str = "token" if auth == f"Bearer {KEY}" else 401
            if server.dep.scaled_down:
                answer = server.after
            if answer == "stall":
                time.sleep(3)  # past the probe's read timeout (--timeout 1s)
                answer = "token"
            if answer == "token":
                body = ROLE + TOKEN + b"data: [DONE]\n\n"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
            else:
                assert isinstance(answer, int)
                # Like some gateways, the 401 quotes the key it got back.
                said = f"invalid key {auth}" if answer == 401 else f"model m not found ({answer})"
                body = json.dumps({"error": {"message": said}}).encode()
                self.send_response(answer)
                self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            with contextlib.suppress(OSError):  # a stalled answer the probe gave up on
                self.wfile.write(body)

    return Handler


@pytest.mark.parametrize(("after", "code", "named"), [(401, 2, "HTTP 401"), (404, 2, "HTTP 404"), (500, 2, "HTTP 500")])
def test_the_key_is_sent_and_a_refusal_stops_the_probe_and_restores(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    after: int,
    code: int,
    named: str,
) -> None:
    monkeypatch.setenv("VLLM_KEY", KEY)
    with fake_api(tmp_path) as (c, kubeconfig):
        dep = Deployment(c)
        server = Server(dep, after)
        with serve(server) as url:
            assert main(_argv(kubeconfig, "--url", url, "--api-key-env", "VLLM_KEY")) == code
        patches, replicas = _patches(c), _replicas(c)
    captured = capsys.readouterr()
    assert patches == [0, 2] and replicas == 2
    assert server.auth == [f"Bearer {KEY}"] * 2  # the one before the scale-down, the one refused: no retry
    assert named in captured.err and "scaled back to 2" in captured.err
    assert "SECRET" not in captured.err + captured.out and "0123456789" not in captured.err
    if after == 401:
        assert "quotes the credential" in captured.err
    else:
        assert "model m not found" in captured.err
    assert not c.proxy_headers  # nothing went through the API server


def test_a_wrong_key_is_refused_before_anything_is_scaled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VLLM_KEY", "SECRET-wrong-key-9876543210")
    with fake_api(tmp_path) as (c, kubeconfig):
        dep = Deployment(c)
        with serve(Server(dep, "token")) as url:
            assert main(_argv(kubeconfig, "--url", url, "--api-key-env", "VLLM_KEY")) == 2
        patches = _patches(c)
    err = capsys.readouterr().err
    assert patches == [] and "HTTP 401" in err and "nothing was scaled" in err and "SECRET" not in err


def test_a_stalled_server_times_out_and_restores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VLLM_KEY", KEY)
    with fake_api(tmp_path) as (c, kubeconfig):
        dep = Deployment(c, lag=0)
        server = Server(dep, "stall")
        with serve(server) as url:
            assert main(_argv(kubeconfig, "--url", url, "--api-key-env", "VLLM_KEY", timeout="1s")) == 1
        patches, replicas = _patches(c), _replicas(c)
    err = capsys.readouterr().err
    assert patches == [0, 2] and replicas == 2
    assert "no first token" in err and "ReadTimeoutError" in err and "replicas restored" in err


def test_a_server_that_is_down_while_the_pods_start_is_retried_until_it_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Connection refused while the pods start is "not yet": the probe goes on until the server is back."""
    monkeypatch.setenv("VLLM_KEY", KEY)
    with fake_api(tmp_path) as (c, kubeconfig):
        dep = Deployment(c, lag=1)
        server = Server(dep, "token")
        loop = Loopback(server)
        url = loop.start()
        back: list[float] = []

        def down_then_back(c_: Any, ns: str, name: str, replicas: int) -> None:
            Deployment.scaled(dep, c_, ns, name, replicas)
            if replicas == 0:
                loop.stop()  # its pods are gone: refused
            else:  # back 0.5 s after the scale-up, well after the first pod is Ready
                threading.Timer(0.5, lambda: (back.append(time.monotonic()), loop.start())).start()

        c.on_scale = down_then_back
        try:
            code = main(_argv(kubeconfig, "--url", url, "--api-key-env", "VLLM_KEY"))
        finally:
            loop.stop()
        patches, replicas = _patches(c), _replicas(c)
    out = capsys.readouterr().out
    assert code == 0 and back and patches == [0, 2] and replicas == 2
    assert server.auth == [f"Bearer {KEY}"] * 2  # the probe before, and the first one the server was there for
    assert "cold start" in out
