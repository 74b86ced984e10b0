"""The final push to a real Pushgateway (Debian's `prometheus-pushgateway`): grouped by scenario only, so a second
run of the same scenario replaces the first's group (a nightly run leaves one group, not one per night), and which
run the group holds is `loadgen_run_info`'s `started` label."""

from __future__ import annotations

import json
import shutil
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.config.live_metrics import DEFAULT_BUCKETS_S
from loadgen.live.exporter import LiveView, MetricsText, push_final
from loadgen.locust_plugin.launcher import free_port
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.histogram import LatencyHistogram
from tests.serving import serving_process


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=3) as r:
        return bytes(r.read())


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[str]:
    exe = shutil.which("prometheus-pushgateway")
    if exe is None:
        pytest.skip("prometheus-pushgateway is not installed (apt-get install -y prometheus-pushgateway)")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # Debian's default persistence file is shared by every instance: this one's is its own.
    cmd = [exe, f"--web.listen-address=127.0.0.1:{port}", f"--persistence.file={tmp_path / 'pg.data'}"]
    with serving_process(
        cmd, tmp_path / "pg.log", lambda: _get(f"{url}/-/ready") is not None, "pushgateway", poll_s=0.2
    ):
        yield url


def _view(ok: int, run: int, started: str) -> LiveView:
    agg = Aggregate()
    g = agg.group("base", "chat")
    g.requests, g.ok, g.output_tokens = ok, ok, 10 * ok
    h = LatencyHistogram()
    for i in range(ok):
        h.record(0.05 + i / 1000)
    g.hists["ttft"] = h
    return LiveView(agg, {}, "nightly", run, None, started)


def test_a_second_run_replaces_the_first_runs_group(pushgateway: str) -> None:
    for ok, run, started in ((40, 1, "20261201T010000Z"), (25, 2, "20261202T010000Z")):
        view = _view(ok, run, started)
        push_final(pushgateway, MetricsText(lambda v=view: v, DEFAULT_BUCKETS_S), "nightly")
    groups = json.loads(_get(f"{pushgateway}/api/v1/metrics"))["data"]
    keys = [g["labels"] for g in groups]
    assert keys == [{"job": "loadgen", "scenario": "nightly"}]
    pushed = [
        s
        for fam in text_string_to_metric_families(_get(f"{pushgateway}/metrics").decode())
        for s in fam.samples
        if s.labels.get("job") == "loadgen"
    ]
    requests = [s.value for s in pushed if s.name == "loadgen_requests_total" and s.labels["outcome"] == "ok"]
    assert requests == [25]  # the second run's figure, alone
    (info,) = [s for s in pushed if s.name == "loadgen_run_info"]
    assert info.labels["started"] == "20261202T010000Z" and info.labels["run"] == "2"
