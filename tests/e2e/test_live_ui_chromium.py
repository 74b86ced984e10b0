"""The LLM tab of Locust's web UI and loadgen's charts page, in headless Chromium, on a master with two workers.

The simulator serves two variants; a Locust master (web UI on loopback) and two worker processes run the packaged
locustfile. Started from the UI's HTTP API (/swarm), the run must show in the browser: the LLM tab's table appears,
its numbers change between two screenshots taken seconds apart, and after /stop (the page reloaded, as Locust's page
stops polling once the run is stopped) its per-variant rows are the rows of the run's own final report. The charts
page draws its charts from the live timeline with every address but loopback dead, and asks nothing of anyone but
its own origin.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver

from loadgen.live.web_rows import TABLES, llm_rows, worker_rows
from loadgen.locust_plugin.launcher import LOCUSTFILE, free_port
from loadgen.sim.launch import start_sim_process
from tests.integration.harness import write_scenario

from .browser import chart_state, chromium, network_events, severe_console

pytestmark = pytest.mark.e2e

# The LLM table's cells, by column title, as the page shows them.
TABLE_JS = """
var tables = Array.from(document.querySelectorAll("table"));
for (var t of tables) {
  var heads = Array.from(t.querySelectorAll("thead th")).map(function (th) { return th.textContent.trim(); });
  if (heads.indexOf(arguments[0]) < 0) continue;
  return Array.from(t.querySelectorAll("tbody tr")).map(function (tr) {
    var cells = Array.from(tr.querySelectorAll("td")).map(function (td) { return td.textContent.trim(); });
    var row = {}; heads.forEach(function (h, i) { row[h] = cells[i]; }); return row;
  });
}
return null;
"""


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def _post(url: str, form: dict[str, Any] | None = None) -> Any:
    data = urllib.parse.urlencode(form or {}).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as r:
        return json.loads(r.read() or b"{}")


def _wait(what: str, check: Any, timeout: float = 30.0, every: float = 0.3) -> Any:
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(every)
    return got


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("live-ui")
    with start_sim_process(["a=int8", "b=baseline"]) as sim:
        scenario = write_scenario(
            tmp / "s.yaml", {v: sim.base_url(v) for v in ("a", "b")}, load={"users": 6, "duration": "60s"}
        )
        web, port = free_port(), free_port()
        base = [sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "--scenario", str(scenario)]
        base += ["--report-dir", str(tmp / "report")]
        procs = [
            subprocess.Popen(
                [*base, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port)]
                + ["--web-host", "127.0.0.1", "--web-port", str(web)],
                stdout=subprocess.DEVNULL,
                stderr=(tmp / "master.log").open("wb"),
            )
        ]
        for i in range(2):
            procs.append(
                subprocess.Popen(
                    [*base, "--worker", "--master-host", "127.0.0.1", "--master-port", str(port)],
                    stdout=subprocess.DEVNULL,
                    stderr=(tmp / f"worker-{i}.log").open("wb"),
                )
            )
        url = f"http://127.0.0.1:{web}"
        try:

            def two_workers() -> bool:
                try:
                    return len(_get(url + "/stats/requests").get("workers", [])) == 2
                except OSError:
                    assert procs[0].poll() is None, (tmp / "master.log").read_text()[-3000:]
                    return False

            _wait("the master and its two workers", two_workers)
            yield url
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium(loopback=True) as drv:
        yield drv


def _as_shown(row: dict[str, Any]) -> dict[str, str]:
    """A row as Locust's page prints it (JavaScript's number formatting: 1338.0 is "1338")."""
    out = {}
    for k, v in row.items():
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        out[k] = str(v)
    return out


def _by_title(rows: list[dict[str, Any]]) -> list[dict[str, str]]:
    titles = {c["key"]: c["title"] for c in TABLES[0]["structure"]}
    return [{titles[k]: v for k, v in _as_shown(r).items()} for r in rows]


def test_the_llm_tab_runs_live_and_ends_on_the_report(ui: str, browser: webdriver.Chrome, tmp_path: Path) -> None:
    assert _post(ui + "/swarm", {"user_count": 6, "spawn_rate": 100})["success"]
    # Locust's page polls only while a run is on: loaded a moment too early it would stay on its start form.
    _wait("a running swarm", lambda: _get(ui + "/stats/requests")["state"] == "running")
    network_events(browser)
    browser.get(ui + "/?tab=llm")
    first = _wait("the LLM tab's rows", lambda: browser.execute_script(TABLE_JS, "TTFT p50 ms") or None)
    assert [(r["Variant"], r["Mix"]) for r in first] == [("a", "all mixes"), ("b", "all mixes")]
    # Requests must be flowing before the first picture, or "changed" would only mean "started".
    first = _wait(
        "requests in both rows",
        lambda: (
            (rows := browser.execute_script(TABLE_JS, "TTFT p50 ms")) and all(int(r["Requests"]) for r in rows) and rows
        ),
    )
    shot1 = browser.get_screenshot_as_png()
    (tmp_path / "llm-tab-1.png").write_bytes(shot1)
    time.sleep(5)  # two of the page's 2 s polls, and a worker report (3 s) in between
    second = browser.execute_script(TABLE_JS, "TTFT p50 ms")
    shot2 = browser.get_screenshot_as_png()
    (tmp_path / "llm-tab-2.png").write_bytes(shot2)
    assert shot1 != shot2
    for a, b in zip(first, second, strict=True):
        assert int(b["Requests"]) > int(a["Requests"]), (a, b)
        assert float(b["TTFT p50 ms"].replace(",", "")) > 0 and b["Run trust"] == "ok"
    assert browser.find_element("id", "loadgen-charts-link").is_displayed()
    # Only loopback was asked for.
    hosts = {urllib.parse.urlsplit(e["url"]).netloc for e in network_events(browser) if "url" in e}
    assert hosts <= {urllib.parse.urlsplit(ui).netloc}, hosts

    _post(ui + "/stop")
    report = _wait("the final report", lambda: (r := _get(ui + "/loadgen/report.json"))["run"]["finished"] and r)
    browser.refresh()
    shown = _wait("the rows after the stop", lambda: browser.execute_script(TABLE_JS, "TTFT p50 ms"))
    assert shown == _by_title(llm_rows(report))
    assert sum(int(r["Requests"]) for r in shown) == sum(v["overall"]["requests"] for v in report["variants"]) > 0
    # The trust tab: one row per worker, each judged.
    browser.get(ui + "/?tab=llm_trust")
    workers = _wait("the trust rows", lambda: browser.execute_script(TABLE_JS, "Loop lag p99 ms"))
    assert [w["Worker"] for w in workers] == [r["worker"] for r in worker_rows(report)] == ["worker-0", "worker-1"]
    assert severe_console(browser) == []


def test_the_charts_page_draws_offline(ui: str, browser: webdriver.Chrome) -> None:
    _wait("a stopped runner", lambda: _get(ui + "/stats/requests")["state"] in ("stopped", "ready"))
    assert _post(ui + "/swarm", {"user_count": 6, "spawn_rate": 100})["success"]
    _wait("a running swarm", lambda: _get(ui + "/stats/requests")["state"] == "running")
    try:
        network_events(browser)
        browser.get(ui + "/loadgen/charts")
        _wait("two redraws", lambda: (browser.execute_script("return window.loadgenChartUpdates") or 0) >= 2, 20)
        # A bin is drawn once settled (a worker's report interval plus the E2E p99 after its end): seconds in.
        # Lines, not dots: at least two settled bins in every series.
        drawn = ("time-ttft", "time-e2e", "time-tokens")

        def settled() -> dict[str, Any] | None:
            st = chart_state(browser)
            return st if all(st.get(c, {}).get("elements", 0) >= 2 * st[c]["datasets"] > 0 for c in drawn) else None

        state = _wait("settled bins", settled, 40)
        assert browser.execute_script("return window.loadgenChartErrors") == []
        assert sorted(state) == ["time-e2e", "time-errors", "time-tokens", "time-ttft"]
        # Two variants: p50 and p99 each in the latency charts, one line each for tokens/s.
        for cid, lines in (("time-ttft", 4), ("time-e2e", 4), ("time-tokens", 2)):
            c = state[cid]
            assert c["chart"] and c["datasets"] == lines and c["elements"] > 0 and c["painted"] > 50, (cid, c)
        # A new run: its charts start from zero (run 2 here, whatever run 1 held).
        status = browser.find_element("id", "status").text
        assert status.startswith("run 2, live"), status
        urls = [e["url"] for e in network_events(browser) if "url" in e]
        assert urls and all(u.startswith(ui + "/loadgen/charts") for u in urls), urls
        assert severe_console(browser) == []
    finally:
        _post(ui + "/stop")
