"""`metrics.prometheus` against a Prometheus that misbehaves, on loopback: a stand-in answering the HTTP API as
Prometheus does (tests/e2e/test_prometheus.py reads the real one). Every failure is a note or a query's error in
the report, never an exception; before load, a refusal or an unreachable URL names the field (exit 2), and the
`locust -f` path checks the same."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from loadgen.config.live_metrics import ClusterPrometheus
from loadgen.live.cluster_metrics import MAX_POINTS, MAX_SERIES, check_queries, query_window
from loadgen.locust_plugin.launcher import LOCUSTFILE, free_port
from loadgen.sim.launch import start_sim_process
from tests.serving import threaded_http

from .harness import write_scenario


class _Prom(BaseHTTPRequestHandler):
    """/api/v1/query and /query_range: `up` is one series, `gpu` 70 (one per GPU), `bad(` is refused as bad_data,
    `boom` is an HTTP 500 with a text body; every request is kept (path, params, Authorization)."""

    seen: list[tuple[str, dict[str, str], str | None]] = []

    def do_GET(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        params = dict(urllib.parse.parse_qsl(url.query))
        type(self).seen.append((url.path, params, self.headers.get("Authorization")))
        q = params.get("query", "")
        if q == "boom":
            return self._send(500, b"internal error", "text/plain")
        if q.startswith("bad("):
            doc = {"status": "error", "errorType": "bad_data", "error": "parse error: unclosed left parenthesis"}
            return self._send(400, json.dumps(doc).encode())
        if url.path.endswith("/query"):
            return self._send(200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}}))
        start, end, step = float(params["start"]), float(params["end"]), float(params["step"])
        ts = [start + i * step for i in range(int((end - start) / step) + 1)]
        if q == "up":
            values = ["1", "NaN", "+Inf", "0.5"] * 99
            series = [{"metric": {"job": "x"}, "values": [[t, v] for t, v in zip(ts, values, strict=False)]}]
        else:
            series = [{"metric": {"gpu": f"{g:02d}"}, "values": [[t, str(g)] for t in ts]} for g in range(70, 0, -1)]
        body = {"status": "success", "data": {"resultType": "matrix", "result": series}}
        self._send(200, json.dumps(body).encode())

    def _send(self, code: int, body: bytes | str, kind: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else body
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.fixture
def prom() -> Iterator[str]:
    _Prom.seen = []
    with threaded_http(_Prom) as srv:
        yield f"http://127.0.0.1:{srv.server_address[1]}"


def _cfg(url: str, **queries: str) -> ClusterPrometheus:
    return ClusterPrometheus(url=url, queries=queries, step=1.0, timeout=3.0)


def test_series_values_summaries_and_limits(prom: str) -> None:
    out = query_window(_cfg(prom, up="up", gpu="gpu"), 1000.0, 1003.0)
    assert out["note"] is None and out["step_s"] == 1.0
    up, gpu = out["queries"]
    assert up["error"] is None and len(up["series"]) == 1
    s = up["series"][0]
    # NaN and ±Inf are gaps (None), not numbers that would poison a mean.
    assert s["labels"] == {"job": "x"} and s["t_unix_s"] == [1000.0, 1001.0, 1002.0, 1003.0]
    assert s["values"] == [1.0, None, None, 0.5] and s["mean"] == 0.75 and (s["min"], s["max"]) == (0.5, 1.0)
    # In label order, at most MAX_SERIES, the rest counted.
    assert len(gpu["series"]) == MAX_SERIES and gpu["series_left_out"] == 70 - MAX_SERIES
    assert [x["labels"]["gpu"] for x in gpu["series"][:3]] == ["01", "02", "03"]


def test_a_long_run_keeps_at_most_max_points_per_series(prom: str) -> None:
    out = query_window(_cfg(prom, up="up"), 0.0, 7200.0)
    assert out["step_s"] == pytest.approx(7200.0 / MAX_POINTS)
    assert len(out["queries"][0]["series"][0]["values"]) <= MAX_POINTS + 1


def test_a_refused_query_is_its_error_and_the_others_still_read(prom: str) -> None:
    out = query_window(_cfg(prom, broken="bad(up", up="up", boom="boom"), 1000.0, 1002.0)
    assert out["note"] is not None and "HTTP 500" in out["note"]  # a server error: the whole section is a note
    out = query_window(_cfg(prom, broken="bad(up", up="up"), 1000.0, 1002.0)
    assert out["note"] is None
    broken, up = out["queries"]
    assert broken["error"] == "bad_data: parse error: unclosed left parenthesis" and broken["series"] == []
    assert up["error"] is None and up["series"]


def test_an_unreachable_prometheus_is_a_note() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    out = query_window(_cfg(url, up="up"), 1000.0, 1002.0)
    assert out["queries"] == [] and out["note"].startswith(f"cannot reach {url}")
    assert check_queries(_cfg(url, up="up")) == [("metrics.prometheus.url", out["note"].split(": cluster")[0])]


def test_the_check_names_each_refused_query_and_sends_the_token(prom: str) -> None:
    cfg = ClusterPrometheus(url=prom, queries={"a": "up", "b": "bad(x", "c": "bad(y"}, bearer_token_env="LG_TOKEN")
    assert check_queries(cfg, {}) == [
        ("metrics.prometheus.bearer_token_env", "environment variable LG_TOKEN is not set or empty")
    ]
    assert _Prom.seen == []  # nothing asked without the token
    problems = check_queries(cfg, {"LG_TOKEN": "s3cret"})
    assert [f for f, _ in problems] == ["metrics.prometheus.queries.b", "metrics.prometheus.queries.c"]
    assert "bad_data" in problems[0][1] and "'bad(x'" in problems[0][1]
    assert [(p, a) for p, _, a in _Prom.seen] == [("/api/v1/query", "Bearer s3cret")] * 3


def test_locust_f_refuses_a_bad_query_before_load(tmp_path: Path, prom: str) -> None:
    with start_sim_process(["baseline=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"baseline": sim.base_url("baseline")},
            load={"users": 2, "duration": "2s"},
            metrics={"prometheus": {"url": prom, "queries": {"util": "bad(DCGM_FI_DEV_GPU_UTIL"}}},
        )
        cmd = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario), "--headless"]
        run = subprocess.run(cmd + ["-u", "2", "-t", "2s"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr[-2000:]
    assert f"{scenario}: metrics.prometheus.queries.util: Prometheus refuses" in run.stderr
    assert not (tmp_path / "report" / "report.json").exists()
    assert all(path == "/api/v1/query" for path, _, _ in _Prom.seen)  # checked, never read as a run
