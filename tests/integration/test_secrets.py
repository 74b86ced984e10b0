"""An API key from the environment reaches the server and never any output: stdout, logs, reports, records, web UI."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from loadgen.locust_plugin.launcher import free_port

from .harness import write_scenario

CANARY = "sk-canary-7f3a9c1e5b2d4f60a8e1"


class _EchoingServer(BaseHTTPRequestHandler):
    """Odd requests: 401 whose body echoes the key (as real APIs do); even ones: a tiny SSE stream."""

    protocol_version = "HTTP/1.1"
    seen_keys: list[str] = []
    count = 0

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        auth = self.headers.get("Authorization", "")
        type(self).seen_keys.append(auth)
        type(self).count += 1
        if type(self).count % 2:
            body = f'{{"error": {{"message": "Incorrect API key provided: {auth}", "code": 401}}}}'.encode()
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
        else:
            body = (
                b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n'
                b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\ndata: [DONE]\n\n'
            )
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def echo_server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _EchoingServer)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def _all_text(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


def test_canary_key_is_sent_but_never_written(tmp_path: Path, echo_server: str) -> None:
    scenario = write_scenario(tmp_path / "s.yaml", {"a": echo_server}, load={"users": 2, "duration": "3s"})
    text = scenario.read_text().replace(
        "continuous_usage_stats: true", "continuous_usage_stats: true\n  api_key_env: LG_CANARY_KEY"
    )
    scenario.write_text(text)
    env = {**os.environ, "LG_CANARY_KEY": CANARY}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "loadgen.cli",
            "run",
            str(scenario),
            "--workers",
            "1",
            "--raw-records",
            str(tmp_path / "raw"),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env=env,
    )
    assert f"Bearer {CANARY}" in _EchoingServer.seen_keys
    assert "http_4xx" in proc.stdout  # the 401s were counted and classified
    outputs = proc.stdout + proc.stderr + _all_text(tmp_path)
    assert "Incorrect API key" in outputs  # the error detail survived, minus the key
    assert CANARY not in outputs


def test_canary_key_not_in_web_ui(tmp_path: Path, echo_server: str) -> None:
    scenario = write_scenario(tmp_path / "s.yaml", {"a": echo_server}, load={"users": 2, "duration": "30s"})
    scenario.write_text(
        scenario.read_text().replace(
            "continuous_usage_stats: true", "continuous_usage_stats: true\n  api_key_env: LG_CANARY_KEY"
        )
    )
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            "locustfiles/llm.py",
            "--scenario",
            str(scenario),
            "--web-host",
            "127.0.0.1",
            "--web-port",
            str(port),
            "--autostart",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "LG_CANARY_KEY": CANARY},
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        pages = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                stats = urllib.request.urlopen(f"http://127.0.0.1:{port}/stats/requests", timeout=2).read().decode()
            except OSError:
                time.sleep(0.5)
                continue
            if "Incorrect API key" in stats:
                pages = stats
                for path in ("/loadgen/report", "/loadgen/report.json", "/exceptions", "/stats/failures/csv"):
                    pages += urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2).read().decode()
                break
            time.sleep(0.5)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0].decode("utf-8", "replace")
    assert "Incorrect API key" in pages, out[-2000:]
    assert CANARY not in pages + out
