"""Secrets from the environment (the bearer key, key headers, an Authorization header of another scheme, the
Prometheus's basic or bearer credentials, the OTLP receiver's token) reach their servers and never any output: stdout,
logs, reports in every format, raw records, the exporter, the web UI, the bytes the OTLP receiver got, `loadgen
compare` and `loadgen trend` of the reports. The servers answer some requests 401 quoting the credentials they got
(tests/integration/canaries.py); canary values, grepped. (`init`, `validate` and a refused Prometheus:
test_secrets_commands.py; the chart and `k8s run` / `k8s coldstart`: tests/k8s/test_no_secret_values.py.)"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from loadgen.locust_plugin.launcher import free_port
from loadgen.report.formats import formats

from ..otlp_receiver import otlp_receiver
from .canaries import (
    APIM,
    AUTH,
    ENV,
    KEY,
    OTLP_TOKEN,
    PROM_BASIC,
    PROM_BEARER,
    PROM_TOKEN,
    XKEY,
    Seen,
    all_bytes,
    canary_scenario,
    echoing_server,
    leaks,
    prometheus,
)


def _cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **ENV},
    )


def _scrape_until_exit(proc: subprocess.Popen[str], url: str) -> str:
    """The exporter's /metrics, read every half second until the run exits (its last page is the final figures)."""
    pages = ""
    while proc.poll() is None:
        with contextlib.suppress(OSError):
            pages = urllib.request.urlopen(url, timeout=2).read().decode()
        time.sleep(0.5)
    return pages


def _sent_every_credential(server: Seen) -> None:
    assert f"Bearer {KEY}" in server.values("Authorization") and f"Token {AUTH}" in server.values("Authorization")
    assert APIM in server.values("api-key") and XKEY in server.values("x-api-key")


def _rendered(tmp_path: Path, scenario: Path) -> str:
    """Every report format rendered from the report and from the raw shards, then `compare` and `trend`."""
    out = ""
    for fmt in formats().names():
        sources = [["raw", "--scenario", str(scenario)]] + ([["report/report.json"]] if fmt != "csv" else [])
        for source in sources:
            r = _cli("report", str(tmp_path / source[0]), *source[1:], "--format", fmt, "--exit-zero")
            assert r.returncode == 0, (fmt, source, r.stderr)
            out += r.stdout + r.stderr
    report = str(tmp_path / "report" / "report.json")
    r = _cli("compare", report, report, "--json", str(tmp_path / "compare.json"))
    assert r.returncode in (0, 1, 3) and (tmp_path / "compare.json").is_file(), r.stderr
    out += r.stdout + r.stderr
    r = _cli("trend", report, report, "--out", str(tmp_path / "trend.html"))
    assert r.returncode == 0 and (tmp_path / "trend.html").is_file(), r.stderr
    return out + r.stdout + r.stderr


def test_canaries_are_sent_but_never_written(tmp_path: Path) -> None:
    # Headless with every output on: reports, raw shards, the exporter, OTLP export, stdout / stderr; then every
    # report format rendered from the report and from the raw shards, `compare` and `trend`.
    with echoing_server() as (server, seen), prometheus() as (prom, prom_seen), otlp_receiver() as (otlp, received):
        scenario = canary_scenario(tmp_path / "s.yaml", server, prom, "3s", PROM_BASIC, tracing={"otlp_endpoint": otlp})
        port = free_port()
        cmd = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--workers", "1"]
        cmd += ["--raw-records", str(tmp_path / "raw"), "--metrics-port", str(port), "--metrics-linger", "2"]
        env = {**os.environ, **ENV}
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        metrics = _scrape_until_exit(proc, f"http://127.0.0.1:{port}/metrics")
        out, err = proc.communicate(timeout=90)
    _sent_every_credential(seen)
    assert prom_seen.requests and all(r["Authorization"].startswith("Basic ") for r in prom_seen.requests)
    assert received.bodies and any(f"Bearer {OTLP_TOKEN}" == h.get("authorization") for h in received.headers)
    assert "http_4xx" in out, out + err  # the 401s were counted and classified
    assert "loadgen_requests_total" in metrics
    rendered = _rendered(tmp_path, scenario)
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    queries = {q["name"]: q for q in report["cluster_metrics"]["queries"]}
    assert queries["up"]["series"] and "bad credentials" in queries["denied"]["error"], queries
    outputs = out + err + metrics + rendered
    assert "Incorrect API key" in outputs + all_bytes(tmp_path).decode("utf-8", "replace")  # the detail survived
    assert "LG_CANARY_APIM" in all_bytes(tmp_path).decode()  # the report's scenario names the variable
    assert leaks(outputs) == [] and leaks(all_bytes(tmp_path)) == []
    assert leaks(b"".join(received.bodies)) == []


def test_canaries_not_in_web_ui(tmp_path: Path) -> None:
    with echoing_server() as (server, seen), prometheus() as (prom, prom_seen):
        scenario = canary_scenario(tmp_path / "s.yaml", server, prom, "30s", PROM_BEARER)
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "locust", "-f", "locustfiles/llm.py", "--scenario", str(scenario)]
            + ["--web-host", "127.0.0.1", "--web-port", str(port), "--autostart"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **ENV},
            cwd=Path(__file__).resolve().parents[2],
        )
        # loadgen's routes (locust_plugin/web_ui.py ROUTES: not imported, the tests' collection imports no locust)
        # and Locust's own pages that show errors.
        ours = ("/loadgen/report.json", "/loadgen/report", "/loadgen/report.md", "/loadgen/charts")
        ours += ("/loadgen/charts.json", "/metrics")
        paths = ("/", *ours, "/exceptions", "/stats/failures/csv", "/stats/requests/csv")
        try:
            pages = ""
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    stats = urllib.request.urlopen(f"http://127.0.0.1:{port}/stats/requests", timeout=2).read()
                except OSError:
                    time.sleep(0.5)
                    continue
                if b"Incorrect API key" in stats:
                    pages = stats.decode()
                    for path in paths:
                        pages += urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).read().decode()
                    break
                time.sleep(0.5)
        finally:
            proc.terminate()
            out = proc.communicate(timeout=30)[0].decode("utf-8", "replace")
    assert "Incorrect API key" in pages, out[-2000:]
    assert "bad credentials" in pages  # the refused query, in the report the UI serves
    _sent_every_credential(seen)
    assert f"Bearer {PROM_TOKEN}" in prom_seen.values("Authorization")
    assert leaks(pages + out) == []


def test_canaries_not_in_a_sweep(tmp_path: Path) -> None:
    # `loadgen sweep`: its own outputs (sweep.json / .md / .html, each step's report) hold no secret either.
    with echoing_server() as (server, seen), prometheus() as (prom, _):
        scenario = canary_scenario(tmp_path / "s.yaml", server, prom, "2s", PROM_BEARER)
        proc = _cli(
            "sweep", str(scenario), "--rates", "2,4", "--step-duration", "2s", "--workers", "0",
            "--report-dir", str(tmp_path / "sweep"), timeout=120,
        )  # fmt: skip
    assert (tmp_path / "sweep" / "sweep.json").is_file(), proc.stdout + proc.stderr
    _sent_every_credential(seen)
    outputs = proc.stdout + proc.stderr + all_bytes(tmp_path).decode("utf-8", "replace")
    assert "LG_CANARY_APIM" in outputs and "Incorrect API key" in outputs  # the echoed error is in the steps
    assert leaks(outputs) == []
