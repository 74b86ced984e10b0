"""The master's exporter under a real Prometheus and Pushgateway (Debian's `prometheus`, `prometheus-pushgateway`;
.ci/run installs them), during a headless `loadgen run` on the simulator (a master and one worker, 127.0.0.1):

- Prometheus scrapes --metrics-port every second: `sum(loadgen_requests_total)` grows during the run and equals the
  report's request count once the final figures are in (--metrics-linger keeps them up), and `histogram_quantile`
  of the TTFT buckets lands in the bucket that holds the report's exact TTFT p99;
- the Pushgateway holds the final figures after the run (job loadgen, grouped by scenario; the start a label);
- every query of the Grafana dashboard names only metrics a real scrape exports;
- the report's timeline holds the simulator's own metrics (vLLM names), on the client timeline's clock;
- `metrics.prometheus` reads the same Prometheus as a cluster's: report.json's `cluster_metrics` holds each query's
  series over the run window, point for point what Prometheus itself answers for that window; a query Prometheus
  refuses is exit 2 naming it, before any load.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.config.live_metrics import DEFAULT_BUCKETS_S
from loadgen.live.server_metrics import metrics_url
from loadgen.locust_plugin.launcher import free_port
from loadgen.sim.launch import start_sim_process
from tests.integration.harness import read_report, write_scenario

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "loadgen" / "live" / "grafana" / "loadgen-dashboard.json"


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (apt-get install -y prometheus prometheus-pushgateway; .ci/run does)")
    return path


def _get(url: str, timeout: float = 3.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return bytes(r.read())


def _wait_ready(url: str, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 30
    while True:
        assert proc.poll() is None, f"{what} exited with {proc.returncode}"
        try:
            _get(url)
            return
        except OSError:
            assert time.monotonic() < deadline, f"{what} not ready in 30 s"
            time.sleep(0.2)


@pytest.fixture
def prom(tmp_path: Path) -> Iterator[dict[str, Any]]:
    prometheus, pushgateway = _binary("prometheus"), _binary("prometheus-pushgateway")
    exporter, prom_port, pg_port = free_port(), free_port(), free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: loadgen\n    static_configs: [{{targets: ['127.0.0.1:{exporter}']}}]\n"
    )
    logs = [(tmp_path / f"{n}.log").open("wb") for n in ("prometheus", "pushgateway")]
    procs = [
        subprocess.Popen(
            [prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{prom_port}"],
            stdout=logs[0], stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            # Debian's default persistence file is shared by every instance: this one's is its own.
            [pushgateway, f"--web.listen-address=127.0.0.1:{pg_port}", f"--persistence.file={tmp_path / 'pg.data'}"],
            stdout=logs[1], stderr=subprocess.STDOUT,
        ),
    ]  # fmt: skip
    try:
        _wait_ready(f"http://127.0.0.1:{prom_port}/-/ready", procs[0], "prometheus")
        _wait_ready(f"http://127.0.0.1:{pg_port}/-/ready", procs[1], "pushgateway")
        yield {"exporter": exporter, "prom": f"http://127.0.0.1:{prom_port}", "pg": f"http://127.0.0.1:{pg_port}"}
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()


def _query(prom: str, expr: str, **params: str) -> list[dict[str, Any]]:
    path = "query_range" if "start" in params else "query"
    q = urllib.parse.urlencode({"query": expr, **params})
    doc = json.loads(_get(f"{prom}/api/v1/{path}?{q}"))
    assert doc["status"] == "success", doc
    return list(doc["data"]["result"])


def _scalar(prom: str, expr: str) -> float | None:
    res = _query(prom, expr)
    return float(res[0]["value"][1]) if res else None


_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless"}


def dashboard_metric_names(dashboard: dict[str, Any]) -> set[str]:
    """The metric names the dashboard's queries (panel targets and template variables) name."""
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if v.get("type") == "query"]
    names = set()
    for e in exprs:
        e = re.sub(r'"(?:[^"\\]|\\.)*"', "", e)  # strings (label values)
        e = re.sub(r"\{[^}]*\}|\[[^\]]*\]", "", e)  # label matchers, ranges
        e = re.sub(r"\b(by|without|on|ignoring)\s*\([^)]*\)", "", e)  # grouping labels
        e = re.sub(r"label_values\(([^,)]*),[^)]*\)", r"\1", e)  # a template's label argument
        for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?", e):
            if m.group(1) is None and m.group(0) not in _PROMQL_WORDS:
                names.add(m.group(0))
    return names


def test_prometheus_scrapes_the_run_and_the_pushgateway_keeps_it(tmp_path: Path, prom: dict[str, Any]) -> None:
    with start_sim_process(["baseline=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml", {"baseline": sim.base_url("baseline")}, load={"users": 8, "duration": "6s"},
            metrics={"server_scrape_interval": "1s", "prometheus": {"url": prom["prom"], "step": "1s", "queries": {
                "requests": "sum(loadgen_requests_total)", "up": 'up{job="loadgen"}'}}},
        )  # fmt: skip
        report_dir = tmp_path / "report"
        cmd = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--quiet", "--workers", "1",
               "--report-dir", str(report_dir), "--metrics-port", str(prom["exporter"]), "--metrics-linger", "8",
               "--pushgateway", prom["pg"]]  # fmt: skip
        started = time.time()
        run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            body = b""
            deadline = time.monotonic() + 60
            while not (report_dir / "report.md").exists():  # written after report.json
                assert run.poll() is None, run.communicate()[1].decode()[-3000:]
                assert time.monotonic() < deadline, "no report in 60 s"
                if b"loadgen_ttft_seconds_bucket{" not in body:  # a scrape once requests have completed
                    with contextlib.suppress(OSError):
                        body = _get(f"http://127.0.0.1:{prom['exporter']}/metrics")
                time.sleep(0.2)
            report = read_report(report_dir)
            count = sum(v["overall"]["requests"] for v in report["variants"])
            assert count > 50
            got = None
            deadline = time.monotonic() + 7  # inside the linger: a scrape a second
            while got != count and time.monotonic() < deadline:
                time.sleep(0.5)
                got = _scalar(prom["prom"], "sum(loadgen_requests_total)")
            assert got == count, f"Prometheus says {got} requests, the report {count}"
            p99 = _scalar(prom["prom"], "histogram_quantile(0.99, sum by (le) (loadgen_ttft_seconds_bucket))")
            cumulative = {float(r["metric"]["le"]): float(r["value"][1])
                          for r in _query(prom["prom"], "sum by (le) (loadgen_ttft_seconds_bucket)")}  # fmt: skip
            exact = _scalar(prom["prom"], 'loadgen_ttft_quantile_seconds{quantile="0.99"}')
            during = _query(prom["prom"], "sum(loadgen_requests_total)", start=str(started), end=str(time.time()),
                            step="1")  # fmt: skip
        finally:
            out, err = run.communicate(timeout=60)
        assert run.returncode == 0, err.decode()[-3000:]
    report_p99 = report["variants"][0]["overall"]["metrics_ms"]["ttft"]["p99"] / 1e3
    assert exact == pytest.approx(report_p99, abs=1e-9)  # the gauge is the report's own figure
    bounds = [0.0, *DEFAULT_BUCKETS_S]
    k = next(i for i, b in enumerate(bounds) if b >= report_p99)
    # The buckets agree with the exact p99 under the report's rank rule (HDR's: the nearest rank, 0.99·n rounded):
    # that rank lies in the bucket holding the report's p99.
    n = cumulative[math.inf]
    rank = max(int(0.99 * n + 0.5), 1)
    below = cumulative[bounds[k - 1]] if k > 1 else 0.0
    assert below < rank <= cumulative[bounds[k]], (rank, below, cumulative[bounds[k]], report_p99)
    # histogram_quantile ranks at 0.99·n unrounded, so it moves one bucket up only when its rank is the next sample.
    top = k + 1 if math.ceil(0.99 * n) > rank and cumulative[bounds[k]] < 0.99 * n else k
    assert p99 is not None and bounds[k - 1] <= p99 <= bounds[top], (p99, report_p99, bounds[k - 1 : top + 1])
    # Scraped while the load ran: a count between 0 and the final one.
    values = [float(v) for _, v in during[0]["values"]]
    assert any(0 < v < count for v in values), values

    # The Pushgateway: the final figures, under job loadgen and the scenario (one group per scenario), the run's
    # start a label of loadgen_run_info.
    pushed = [
        s
        for fam in text_string_to_metric_families(_get(f"{prom['pg']}/metrics").decode())
        for s in fam.samples
        if s.labels.get("job") == "loadgen"
    ]
    requests = [s for s in pushed if s.name == "loadgen_requests_total"]
    assert requests and {s.labels["scenario"] for s in requests} == {"itest"}
    assert "run" not in requests[0].labels
    (info,) = [s for s in pushed if s.name == "loadgen_run_info"]
    assert re.fullmatch(r"\d{8}T\d{6}Z", info.labels["started"])
    assert sum(s.value for s in requests) == count, requests
    pushed_p99 = [
        s.value for s in pushed if s.name == "loadgen_ttft_quantile_seconds" and s.labels["quantile"] == "0.99"
    ]
    assert pushed_p99 == [pytest.approx(report_p99, abs=1e-9)]

    # Every metric the dashboard queries is on a real scrape of the exporter.
    assert body, "the exporter was never reachable during the run"
    families = list(text_string_to_metric_families(body.decode()))
    # Sample names, and the families declared with no sample yet (errors: none in this run; schedule slip: open
    # loop only), by the names their samples will have.
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "gauge": ("",)}
    declared = {f.name + x for f in families for x in suffixes.get(f.type, ("",))}
    exported = {s.name for fam in families for s in fam.samples} | declared
    assert "loadgen_ttft_seconds_bucket" in {s.name for fam in families for s in fam.samples}
    names = dashboard_metric_names(json.loads(DASHBOARD.read_text()))
    assert names and names <= exported, sorted(names - exported)

    # The simulator's own metrics, on the client timeline's wall clock.
    v = report["variants"][0]
    sm = v["server_metrics"]
    assert sm["source"] == "vllm" and sm["note"] is None and sm["samples"] >= 4, sm
    assert {"running", "waiting", "kv_usage", "generation_tokens_per_s"} <= set(sm["series"])
    assert max(x for x in sm["series"]["running"] if x is not None) > 0
    t0 = v["timeline"]["start_unix_s"]
    assert (
        t0 - 3 <= sm["t_unix_s"][0] and sm["t_unix_s"][-1] <= t0 + len(v["timeline"]["ok"]) * v["timeline"]["bin_s"] + 3
    )
    md = (report_dir / "report.md").read_text()
    assert "## Server metrics" in md and "| baseline | vllm |" in md

    # The cluster Prometheus's queries over the run window: what Prometheus answers for that window itself.
    cm = report["cluster_metrics"]
    assert cm["note"] is None and cm["step_s"] == 1.0 and [q["name"] for q in cm["queries"]] == ["requests", "up"]
    assert cm["start_unix_s"] >= started - 1 and cm["end_unix_s"] - cm["start_unix_s"] > 5
    for q in cm["queries"]:
        assert q["error"] is None and len(q["series"]) == 1, q
        truth = _query(prom["prom"], q["query"], start=f"{cm['start_unix_s']:.3f}", end=f"{cm['end_unix_s']:.3f}",
                       step="1.000")  # fmt: skip
        s = q["series"][0]
        assert s["labels"] == truth[0]["metric"]
        pairs = [(round(float(t), 3), float(v)) for t, v in truth[0]["values"]]
        # The last point may have gained a scrape that landed after the master asked.
        assert list(zip(s["t_unix_s"], s["values"], strict=True))[:-1] == pairs[: len(s["values"]) - 1]
        assert s["max"] == max(v for v in s["values"] if v is not None)
    requests = cm["queries"][0]["series"][0]["values"]
    assert any(0 < v < count for v in requests if v is not None), requests  # it counted up while the load ran
    assert "## Cluster metrics" in md and "| requests | (one series) |" in md


def test_a_query_prometheus_refuses_is_exit_2_before_load(tmp_path: Path, prom: dict[str, Any]) -> None:
    with start_sim_process(["baseline=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml", {"baseline": sim.base_url("baseline")}, load={"users": 2, "duration": "3s"},
            metrics={"prometheus": {"url": prom["prom"], "queries": {"fine": "up", "broken": "sum(rate(up[1m]"}}},
        )  # fmt: skip
        cmd = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--quiet", "--workers", "0",
               "--report-dir", str(tmp_path / "report")]  # fmt: skip
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        served = _get(metrics_url(sim.base_url("baseline"))).decode()
    assert run.returncode == 2, run.stderr[-3000:]
    assert "metrics.prometheus.queries.broken" in run.stderr and "bad_data" in run.stderr, run.stderr[-2000:]
    assert "queries.fine" not in run.stderr
    assert not (tmp_path / "report" / "report.json").exists()
    # Before any load: the simulator generated no token.
    assert re.search(r"^vllm:generation_tokens_total(\{[^}]*\})? 0(\.0)?$", served, re.M), served[-2000:]
