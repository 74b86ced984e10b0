"""A server without /metrics is skipped with a note, on the first read, and never asked again.

The scraper lives in the Locust plugin, and importing Locust monkey-patches the whole process (threads, sockets):
so the check runs in a fresh interpreter, with its own 404 server, and reports back as JSON.
"""

from __future__ import annotations

from tests.fresh_interpreter import run_fresh

SCRIPT = r"""
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from loadgen.live.server_metrics import ServerTimeline
from loadgen.locust_plugin.live_metrics import _scrape_loop


class NoMetrics(BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self):
        type(self).hits += 1
        body = b"not here" if self.path == "/metrics" else b"ok"
        self.send_response(404 if self.path == "/metrics" else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_):
        pass


srv = ThreadingHTTPServer(("127.0.0.1", 0), NoMetrics)
threading.Thread(target=srv.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{srv.server_address[1]}/metrics"
tl = ServerTimeline(url, 0.05)
_scrape_loop(tl, 0.05)  # returns: nothing to scrape
print(json.dumps({"url": url, "hits": NoMetrics.hits, "report": tl.report()}))
"""


def test_no_metrics_endpoint_is_a_note_not_a_timeline() -> None:
    out = run_fresh(SCRIPT)
    assert out["hits"] == 1
    r = out["report"]
    assert r["samples"] == 0 and r["note"] == f"no /metrics at {out['url']} (HTTP 404): server metrics skipped"
