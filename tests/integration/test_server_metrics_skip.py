"""A server without /metrics is skipped with a note, on the first read, and never asked again."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from loadgen.live.server_metrics import ServerTimeline


class _NoMetrics(BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        type(self).hits += 1
        body = b"not here" if self.path == "/metrics" else b"ok"
        self.send_response(404 if self.path == "/metrics" else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _NoMetrics)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/metrics"
    finally:
        srv.shutdown()


def test_no_metrics_endpoint_is_a_note_not_a_timeline(server: str) -> None:
    # Imported here, not at collection: it imports Locust, which monkey-patches the whole test process (time.sleep,
    # threads), and tests collected beside this one rely on the OS's own.
    from loadgen.locust_plugin.live_metrics import _scrape_loop

    tl = ServerTimeline(server, 0.05)
    _scrape_loop(tl, 0.05)  # returns: nothing to scrape
    assert _NoMetrics.hits == 1
    r = tl.report()
    assert r["samples"] == 0 and r["note"] == f"no /metrics at {server} (HTTP 404): server metrics skipped"
