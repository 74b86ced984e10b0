"""Energy per token against a real Prometheus (Debian's `prometheus`; .ci/run installs it), fed by a small exporter of
known power values, in one short `loadgen run` on the simulator (one process, two variants):

- baseline draws a constant 300 W: its energy is exactly 300 W × the measured window, its joules per output token
  that over its output tokens, and its GPU memory (a constant 2048 MiB) 2 GiB max and mean;
- int8 steps from 200 W to 400 W at a known instant inside the window: its energy is the trapezoid figure of the
  samples Prometheus answers for the window (computed here by hand from Prometheus's own answer), and within
  200 W × (one scrape interval + one step) of the true integral (Prometheus holds the step from its first scrape
  after it; a trapezoid spreads it over one step);
- the server's own KV-cache use (the simulator's vLLM gauge) sits beside them, and $ / 1M output tokens follows
  from the declared price, the window and the tokens.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from loadgen.locust_plugin.launcher import free_port
from loadgen.sim.launch import start_sim_process
from tests.integration.harness import read_report, write_scenario
from tests.serving import serving_process, threaded_http


class _Power(BaseHTTPRequestHandler):
    switch_at = float("inf")  # wall clock: int8 draws 200 W before, 400 W from then on

    def do_GET(self) -> None:
        int8 = 400.0 if time.time() >= type(self).switch_at else 200.0
        body = (
            "# TYPE test_power_watts gauge\n"
            f'test_power_watts{{variant="baseline"}} 300\ntest_power_watts{{variant="int8"}} {int8}\n'
            "# TYPE test_fb_used_mib gauge\n"
            'test_fb_used_mib{variant="baseline"} 2048\n'
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=3) as r:
        return json.loads(r.read())


@pytest.fixture
def prom(tmp_path: Path) -> Iterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (apt-get install -y prometheus; .ci/run does)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"

    def scraping() -> bool:  # ready, and both series scraped at least once: the window has samples from its start
        return len(_get_json(f"{url}/api/v1/query?query=test_power_watts")["data"]["result"]) == 2

    with threaded_http(_Power) as exporter:
        config = tmp_path / "prometheus.yml"
        config.write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n"
            f"  - job_name: power\n    static_configs: [{{targets: ['127.0.0.1:{exporter.server_address[1]}']}}]\n"
        )
        cmd = [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
        with serving_process([*cmd, f"--web.listen-address=127.0.0.1:{port}"], tmp_path / "prometheus.log", scraping,
                             "prometheus (scraping)"):  # fmt: skip
            yield url


def _samples(prom: str, query: str, start: float, end: float) -> list[tuple[float, float]]:
    q = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": "1.000"})
    (series,) = _get_json(f"{prom}/api/v1/query_range?{q}")["data"]["result"]
    return [(float(t), float(v)) for t, v in series["values"]]


def _trapezoid(points: list[tuple[float, float]], start: float, end: float) -> float:
    """By hand: the first and last value held to the window's edges, trapezoids between."""
    joules = points[0][1] * (points[0][0] - start) + points[-1][1] * (end - points[-1][0])
    return joules + sum((a[1] + b[1]) / 2 * (b[0] - a[0]) for a, b in zip(points, points[1:], strict=False))


def test_energy_per_token_from_a_known_power_profile(tmp_path: Path, prom: str) -> None:
    power = 'sum(test_power_watts{variant="%s"})'
    with start_sim_process(["baseline=int8", "int8=int8"]) as sim:
        baseline = {
            "base_url": sim.base_url("baseline"),
            "power": {"query": power % "baseline"},
            "cost": {"usd_per_hour": 3.6},
            "gpu_memory": {"query": 'sum(test_fb_used_mib{variant="baseline"})'},
        }
        int8 = {"base_url": sim.base_url("int8"), "power": {"query": power % "int8"}}
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"baseline": baseline, "int8": int8},
            load={"users": 4, "duration": "9s", "warmup": "1s"},
            metrics={"server_scrape_interval": "1s", "prometheus": {"url": prom, "step": "1s"}},
        )
        _Power.switch_at = time.time() + 7.0  # the run starts in ~2 s: about 4 s into its 8 s window
        cmd = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--quiet", "--workers", "0",
               "--report-dir", str(tmp_path / "report")]  # fmt: skip
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    report = read_report(tmp_path / "report")
    base, int8 = (v["cost_energy"] for v in report["variants"])
    window = report["run"]["window_s"]
    e = base["energy"]
    assert e["note"] is None and e["end_unix_s"] - e["start_unix_s"] == pytest.approx(window, abs=2e-3)
    # A constant 300 W: exactly 300 W × the window, whatever the samples.
    assert e["joules"] == pytest.approx(300.0 * window, abs=1.0) and e["mean_watts"] == pytest.approx(300.0, abs=0.05)
    assert e["coverage"] > 0.8 and e["samples"] >= int(window) - 1
    assert e["joules_per_output_token"] == pytest.approx(e["joules"] / base["output_tokens"], rel=1e-4)
    assert base["output_tokens"] > 100
    assert base["gpu_memory"]["max_gib"] == 2.0 and base["gpu_memory"]["mean_gib"] == 2.0
    assert base["cost"]["usd_per_1m_output_tokens"] == pytest.approx(
        3.6 * base["window_s"] / 3600 / base["output_tokens"] * 1e6,
        rel=2e-4,  # window_s rounded to 1 ms
    )
    assert base["kv"] is not None and 0 < base["kv"]["max"] <= 1  # the simulator's own KV-cache gauge

    # The step: Prometheus's own samples of the window, integrated by hand, and the truth within its resolution.
    s = int8["energy"]
    start, end, switch = s["start_unix_s"], s["end_unix_s"], _Power.switch_at
    assert start + 1 < switch < end - 1, (start, switch, end)  # the step lies inside the window
    by_hand = _trapezoid(_samples(prom, power % "int8", start, end), start, end)
    # (the report's window edges are rounded to the millisecond: ≤ 400 W × 2 ms apart)
    assert s["joules"] == pytest.approx(by_hand, abs=1.0)
    truth = 200.0 * (switch - start) + 400.0 * (end - switch)
    assert abs(s["joules"] - truth) <= 200.0 * (1.0 + 1.0), (s["joules"], truth)
    md = (tmp_path / "report" / "report.md").read_text()
    assert "## Cost and energy" in md and f"| {e['mean_watts']:,.1f} |" in md
    page = (tmp_path / "report" / "report.html").read_text()
    assert "<h2>Cost and energy</h2>" in page and "energy-per-token" in page  # the table and the J/token chart
