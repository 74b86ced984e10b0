"""Secrets from the environment (the API key, a header, the Prometheus's credentials) reach their servers and never
any output: stdout, logs, reports in every format, raw records, the exporter, the web UI. Canary values, grepped."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from loadgen.locust_plugin.launcher import free_port
from loadgen.report.formats import formats
from tests.serving import threaded_http

from .harness import write_scenario

CANARY = "sk-canary-7f3a9c1e5b2d4f60a8e1"
# One canary per secret-bearing field: the bearer key, a header from the environment, the Prometheus's basic auth.
HEADER_CANARY = "hdr-canary-0b9d27c4e18f"
PROM_USER, PROM_CANARY = "lg-prom-user", "prom-canary-5e6a13f0c2d8"
CANARIES = (CANARY, HEADER_CANARY, PROM_CANARY)
ENV = {"LG_CANARY_KEY": CANARY, "LG_CANARY_HDR": HEADER_CANARY, "LG_PROM_USER": PROM_USER, "LG_PROM_PASS": PROM_CANARY}
SECRET_FIELDS = {"api_key_env": "LG_CANARY_KEY", "headers_from_env": {"api-key": "LG_CANARY_HDR"}}


class _EchoingServer(BaseHTTPRequestHandler):
    """Odd requests: 401 whose body echoes the credentials it got (as real APIs do); even ones: a tiny SSE stream."""

    protocol_version = "HTTP/1.1"
    seen_keys: list[str] = []
    seen_headers: list[str] = []
    count = 0

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        auth = self.headers.get("Authorization", "")
        type(self).seen_keys.append(auth)
        type(self).seen_headers.append(self.headers.get("api-key", ""))
        type(self).count += 1
        if type(self).count % 2:
            echoed = f"{auth} / api-key {self.headers.get('api-key', '')}"
            body = f'{{"error": {{"message": "Incorrect API key provided: {echoed}", "code": 401}}}}'.encode()
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


class _Prom(BaseHTTPRequestHandler):
    """A Prometheus that answers only its basic-auth credentials (401 otherwise) with one series per query."""

    seen: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server API
        auth = self.headers.get("Authorization", "")
        type(self).seen.append(auth)
        if auth != "Basic " + base64.b64encode(f"{PROM_USER}:{PROM_CANARY}".encode()).decode():
            return self._send(401, {"status": "error", "errorType": "auth", "error": f"bad credentials {auth}"})
        params = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
        if "step" not in params:
            return self._send(200, {"status": "success", "data": {"resultType": "vector", "result": []}})
        start, step = float(params["start"]), float(params["step"])
        values = [[start + i * step, "1"] for i in range(3)]
        self._send(
            200, {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": values}]}}
        )

    def _send(self, code: int, doc: dict[str, object]) -> None:
        data = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


def _serve(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    with threaded_http(handler) as srv:
        yield f"http://127.0.0.1:{srv.server_address[1]}"


@pytest.fixture()
def echo_server() -> Iterator[str]:
    yield from _serve(_EchoingServer)


@pytest.fixture()
def prometheus() -> Iterator[str]:
    yield from _serve(_Prom)


def _canary_scenario(path: Path, server: str, prometheus: str, duration: str) -> Path:
    """Every secret-bearing field of a scenario, each from its canary variable."""
    prom = {
        "url": prometheus,
        "queries": {"up": "up"},
        "basic_auth_env": {"username": "LG_PROM_USER", "password": "LG_PROM_PASS"},
    }
    return write_scenario(
        path,
        {"a": {"base_url": server, **SECRET_FIELDS}},
        load={"users": 2, "duration": duration},
        metrics={"server_scrape_interval": 0, "prometheus": prom},
    )


def _leaks(text: str) -> list[str]:
    return [c for c in CANARIES if c in text]


def _all_text(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


def _scrape_until_exit(proc: subprocess.Popen[str], url: str) -> str:
    """The exporter's /metrics, read every half second until the run exits (its last page is the final figures)."""
    pages = ""
    while proc.poll() is None:
        with contextlib.suppress(OSError):
            pages = urllib.request.urlopen(url, timeout=2).read().decode()
        time.sleep(0.5)
    return pages


def test_canaries_are_sent_but_never_written(tmp_path: Path, echo_server: str, prometheus: str) -> None:
    # Headless with every output on: reports, raw shards, the exporter, stdout / stderr; then every report format
    # rendered from the report and from the raw shards.
    scenario = _canary_scenario(tmp_path / "s.yaml", echo_server, prometheus, "3s")
    port = free_port()
    cmd = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--workers", "1"]
    cmd += ["--raw-records", str(tmp_path / "raw"), "--metrics-port", str(port), "--metrics-linger", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, **ENV})
    metrics = _scrape_until_exit(proc, f"http://127.0.0.1:{port}/metrics")
    out, err = proc.communicate(timeout=90)
    assert f"Bearer {CANARY}" in _EchoingServer.seen_keys and HEADER_CANARY in _EchoingServer.seen_headers
    assert _Prom.seen and all(a.startswith("Basic ") for a in _Prom.seen)
    assert "http_4xx" in out, out + err  # the 401s were counted and classified
    assert "loadgen_requests_total" in metrics
    rendered = ""
    for fmt in formats().names():
        sources = [["raw", "--scenario", str(scenario)]] + ([["report/report.json"]] if fmt != "csv" else [])
        for source in sources:
            r = subprocess.run(
                [sys.executable, "-m", "loadgen.cli", "report", str(tmp_path / source[0]), *source[1:]]
                + ["--format", fmt, "--exit-zero"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert r.returncode == 0, (fmt, source, r.stderr)
            rendered += r.stdout + r.stderr
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["cluster_metrics"]["queries"][0]["series"], report["cluster_metrics"]
    outputs = out + err + metrics + rendered + _all_text(tmp_path)
    assert "Incorrect API key" in outputs  # the error detail survived, minus the keys
    assert "LG_CANARY_HDR" in outputs  # the report's scenario names the variable
    assert _leaks(outputs) == []


def test_canaries_not_in_web_ui(tmp_path: Path, echo_server: str, prometheus: str) -> None:
    scenario = _canary_scenario(tmp_path / "s.yaml", echo_server, prometheus, "30s")
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
        env={**os.environ, **ENV},
        cwd=Path(__file__).resolve().parents[2],
    )
    # loadgen's routes (locust_plugin/web_ui.py ROUTES: not imported, the tests' collection imports no locust) and
    # Locust's own pages that show errors.
    ours = ("/loadgen/report.json", "/loadgen/report", "/loadgen/report.md", "/loadgen/charts", "/loadgen/charts.json")
    ours += ("/metrics",)
    paths = ("/", *ours, "/exceptions", "/stats/failures/csv", "/stats/requests/csv")
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
                for path in paths:
                    pages += urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).read().decode()
                break
            time.sleep(0.5)
    finally:
        proc.terminate()
        out = proc.communicate(timeout=30)[0].decode("utf-8", "replace")
    assert "Incorrect API key" in pages, out[-2000:]
    assert HEADER_CANARY in _EchoingServer.seen_headers
    assert _leaks(pages + out) == []


def test_canaries_not_in_a_sweep(tmp_path: Path, echo_server: str, prometheus: str) -> None:
    # `loadgen sweep`: its own outputs (sweep.json / .md / .html, each step's report) hold no secret either.
    scenario = _canary_scenario(tmp_path / "s.yaml", echo_server, prometheus, "2s")
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "sweep", str(scenario), "--rates", "2,4", "--step-duration", "2s"]
        + ["--workers", "0", "--report-dir", str(tmp_path / "sweep")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **ENV},
    )
    assert (tmp_path / "sweep" / "sweep.json").is_file(), proc.stdout + proc.stderr
    assert HEADER_CANARY in _EchoingServer.seen_headers
    outputs = proc.stdout + proc.stderr + _all_text(tmp_path)
    assert "LG_CANARY_HDR" in outputs and "Incorrect API key" in outputs  # the echoed error is in the steps
    assert _leaks(outputs) == []
