"""A hosted OpenAI-compatible API over TLS: a private CA trusted through `tls_ca_file`, an untrusted certificate
failing every request as `connect` (no crash), and `tls_verify: false`. The key comes from `api_key_env`."""

from __future__ import annotations

import os
import shutil
import ssl
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loadgen.config.scenario import ConfigError, validate_scenario

from .harness import read_records, run_loadgen, write_scenario

KEY = "sk-tls-test-4b1d"
KEY_ENV = "LG_TLS_TEST_KEY"

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A throwaway CA and a server certificate it signed for localhost / 127.0.0.1."""
    d = tmp_path_factory.mktemp("pki")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    _openssl(
        "req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=loadgen test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=d,
    )  # fmt: skip
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=localhost", cwd=d)
    (d / "ext.cnf").write_text(
        "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
        "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    )
    _openssl(
        "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf",
        cwd=d,
    )  # fmt: skip
    return d


class _SSEHandler(BaseHTTPRequestHandler):
    """A tiny OpenAI chat stream: three content chunks, a usage chunk, [DONE]."""

    protocol_version = "HTTP/1.1"
    auth: list[str] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server API
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        type(self).auth.append(self.headers.get("Authorization", ""))
        body = b"".join(
            b'data: {"choices":[{"index":0,"delta":{"content":"%b"},"finish_reason":null}]}\n\n' % w
            for w in (b"one", b" two", b" three")
        )
        body += b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3}}\n\ndata: [DONE]\n\n'
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def tls_server(pki: Path) -> Iterator[int]:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(pki / "server.pem", pki / "server.key")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _SSEHandler)
    # The handshake runs in accept(); a client that rejects the certificate makes accept() raise an OSError,
    # which socketserver drops, and serving goes on.
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield int(srv.server_address[1])
    srv.shutdown()
    srv.server_close()


def _run(tmp_path: Path, port: int, **tls: Any) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    variant = {"base_url": f"https://localhost:{port}", "api_key_env": KEY_ENV, "continuous_usage_stats": False}
    # Loose trust limits: these runs judge TLS, not timing (a loaded machine's lag must not make them exit 3).
    trust = {"loop_lag_p99_ms": 500, "cpu_percent_p90": 400, "schedule_slip_p99_ms": 500}
    scenario = write_scenario(
        tmp_path / "s.yaml", {"hosted": variant | tls}, load={"users": 2, "duration": "2s"}, slos=[], run_trust=trust
    )
    proc = run_loadgen(
        scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"), env={**os.environ, KEY_ENV: KEY}
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    # A request still in flight at the stop is recorded as cut_by_stop, with what it got: not a finished request.
    return proc, [r for r in read_records(tmp_path / "raw") if not r["cut_by_stop"]]


def test_private_ca_from_tls_ca_file(tmp_path: Path, pki: Path, tls_server: int) -> None:
    _SSEHandler.auth.clear()
    proc, records = _run(tmp_path, tls_server, tls_ca_file=str(pki / "ca.pem"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(records) >= 4 and all(r["error"] is None for r in records)
    assert all(r["chunk_tokens"] == [1, 1, 1] and r["output_tokens"] == 3 for r in records)
    assert _SSEHandler.auth and set(_SSEHandler.auth) == {f"Bearer {KEY}"}


def test_untrusted_certificate_fails_every_request_as_connect(tmp_path: Path, tls_server: int) -> None:
    _SSEHandler.auth.clear()
    proc, records = _run(tmp_path, tls_server)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # nothing succeeded: a dead target is a breach
    assert records and all(r["error"] == "connect" for r in records)
    assert all("certificate" in r["error_detail"] and "tls_ca_file" in r["error_detail"] for r in records)
    assert KEY not in proc.stdout + proc.stderr
    assert not _SSEHandler.auth  # no request got past the handshake


def test_tls_verify_false(tmp_path: Path, tls_server: int) -> None:
    proc, records = _run(tmp_path, tls_server, tls_verify=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert records and all(r["error"] is None and r["output_tokens"] == 3 for r in records)


def test_unloadable_ca_file_fails_requests_not_the_run(tmp_path: Path, tls_server: int) -> None:
    proc, records = _run(tmp_path, tls_server, tls_ca_file=str(tmp_path / "missing.pem"))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert records and all(r["error"] == "connect" and "tls_ca_file" in r["error_detail"] for r in records)


@pytest.mark.parametrize(("field", "value"), [("tls_verify", False), ("tls_ca_file", "ca.pem")])
def test_tls_fields_only_apply_to_https(field: str, value: object) -> None:
    doc = {"variants": [{"name": "a", "base_url": "http://x:1", "model": "m", field: value}]}
    with pytest.raises(ConfigError) as info:
        validate_scenario(doc)
    assert f"variants[0].{field}" in str(info.value) and "https://" in str(info.value)
    doc["variants"][0]["base_url"] = "https://x:1"
    assert getattr(validate_scenario(doc).variants[0], field) == value
