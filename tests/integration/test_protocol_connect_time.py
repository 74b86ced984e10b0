"""Connection time is measured, not hidden: a request that opened its connection records the TCP connect and TLS
handshake it waited for (outside TTFT, which runs from the request write), one that reused a kept-alive connection
records none. Against test_tls.py's HTTPS server (a private CA) on 127.0.0.1."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from loadgen.client.connection import Endpoint, StreamConnection
from loadgen.measure.records import RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect

from .test_tls import pki, tls_server  # noqa: F401 - fixtures

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def test_a_new_tls_connection_has_connect_and_handshake_time_a_reused_one_none(
    pki: Path,  # noqa: F811
    tls_server: int,  # noqa: F811
) -> None:
    d = get_dialect("openai-chat")
    conn = StreamConnection(Endpoint(f"https://localhost:{tls_server}"), 5.0, 5.0, tls_ca_file=str(pki / "ca.pem"))
    head = conn.head_bytes(d.path_for("m"), {"Content-Type": "application/json"})
    records, spans = [], []
    try:
        for _ in range(3):
            rec = RequestRecord("r", "v", "m")
            acc = StreamAccumulator(rec, d)
            started = time.monotonic()
            _, status, _ = conn.post_stream(head, b"", b"{}", acc)
            spans.append(time.monotonic() - started)
            assert status == 200
            records.append(acc.finish(conn.last_rx))
    finally:
        conn.close()
    first, *rest = records
    assert all(r.error is None and list(r.chunk_tokens) == [1, 1, 1] for r in records)
    assert first.connect_s is not None and first.tls_s is not None
    assert 0 < first.connect_s < 0.5 and 0 < first.tls_s < 2.0
    # Both happened before the request was written, inside what the caller waited for.
    assert first.connect_s + first.tls_s < spans[0]
    assert first.sent - (first.connect_s + first.tls_s) >= 0
    assert [(r.connect_s, r.tls_s) for r in rest] == [(None, None), (None, None)]
