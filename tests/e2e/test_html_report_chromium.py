"""The demo's HTML report in a real browser with the network off: every chart drawn, none empty, no request made.

`loadgen demo` (the simulator, a Locust master and a worker) writes report.html by default and prints its path, as a
newcomer sees it; headless Chromium opens the file the demo named, from disk, with every request sent to a dead
proxy. Each chart must exist as a Chart.js chart with data elements laid out and pixels of its series' colours
painted, the page must have asked for nothing and logged no error. The same browser then draws the charts the demo
has no data for (comparison intervals, a sweep's curves, errors over time, rendered from the demo's own report.json
with those sections added), a sweep's own page (sweep.html) and a `loadgen trend` page of five reports.
A page that does make a request is seen to (so the check is not blind).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver

from loadgen.report.html import render_html, render_sweep_html

from .browser import chart_state, chromium, network_events, severe_console, tick_labels, wait_loaded

pytestmark = pytest.mark.e2e

# What the demo's report always holds data for: 4 CDFs, TTFT vs prompt length, 4 charts over time.
DEMO_CHARTS = {
    "cdf-ttft", "cdf-itl", "cdf-tpot", "cdf-e2e", "ttft-vs-prompt",
    "time-tokens", "time-requests", "time-ttft", "time-e2e",
}  # fmt: skip


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The demo's report folder and what it printed (no flag but a short duration and the folder)."""
    out = tmp_path_factory.mktemp("demo")
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "demo", "--duration", "20s", "--report-dir", str(out)],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert (out / "report.html").exists(), proc.stdout[-2000:] + proc.stderr[-3000:]
    return out, proc.stdout


@pytest.fixture(scope="module")
def demo_dir(demo_run: tuple[Path, str]) -> Path:
    return demo_run[0]


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as drv:
        yield drv


def _embedded_ids(page: str) -> list[str]:
    block = re.search(r'<script type="application/json" id="loadgen-data">(.*?)</script>', page, re.S)
    assert block is not None
    return [c["id"] for c in json.loads(block.group(1))["charts"]]


def _open(drv: webdriver.Chrome, path: Path) -> dict[str, dict[str, Any]]:
    network_events(drv)  # drop what an earlier page logged (requests and console alike)
    severe_console(drv)
    drv.get(path.as_uri())
    wait_loaded(drv)
    errors = drv.execute_script("return window.loadgenChartErrors")
    assert errors == [], errors
    events = network_events(drv)
    # The only request: the page's own file.
    assert [e for e in events if e.get("url") != path.as_uri()] == [], events
    assert severe_console(drv) == []
    return chart_state(drv)


def _assert_drawn(state: dict[str, dict[str, Any]], expected: list[str]) -> None:
    assert sorted(state) == sorted(expected)
    for cid, c in state.items():
        assert c["chart"], f"{cid}: no chart object"
        assert c["width"] > 100 and c["height"] > 100, c
        assert c["elements"] > 0, f"{cid}: no data element laid out: {c}"
        assert c["painted"] > 50, f"{cid}: its series' colours are not on the canvas: {c}"


def test_the_demo_report_draws_every_chart_offline(demo_run: tuple[Path, str], browser: webdriver.Chrome) -> None:
    demo_dir, printed = demo_run
    # The page the demo told its user to open: its default output, report.html beside report.json and report.md.
    named = re.search(r"^Open in a browser: (file://\S+)$", printed, re.M)
    assert named is not None, printed[-2000:]
    page = demo_dir / "report.html"
    assert named.group(1) == page.resolve().as_uri()
    assert (demo_dir / "report.json").exists() and (demo_dir / "report.md").exists()
    ids = _embedded_ids(page.read_text(encoding="utf-8"))
    assert set(ids) >= DEMO_CHARTS, ids
    state = _open(browser, page)
    _assert_drawn(state, ids)
    # Three variants: one series per variant in each CDF.
    assert all(state[f"cdf-{m}"]["datasets"] == 3 for m in ("ttft", "itl", "tpot", "e2e"))
    assert browser.find_element("css selector", "body").get_attribute("data-charts-drawn") == str(len(ids))
    # No axis prints two tick labels into each other.
    labels = tick_labels(browser)
    assert sorted(labels) == sorted(ids)
    collisions = {(cid, ax): a["overlaps"] for cid, axes in labels.items() for ax, a in axes.items() if a["overlaps"]}
    assert collisions == {}, collisions


def test_comparison_sweep_and_errors_draw_too(demo_dir: Path, browser: webdriver.Chrome, tmp_path: Path) -> None:
    report = json.loads((demo_dir / "report.json").read_text(encoding="utf-8"))
    report["comparison"] = [
        {"variant": "int8", "metric": "tpot", "stat": "p50", "speedup": 1.6, "ci_low": 1.5, "ci_high": 1.7,
         "within_noise": False},
        {"variant": "spec-decode", "metric": "ttft", "stat": "p99", "speedup": 0.98, "ci_low": 0.9,
         "ci_high": 1.05, "within_noise": True},
    ]  # fmt: skip
    timeline = report["variants"][0]["timeline"]
    timeline["errors"] = {"http_5xx": [i % 3 for i in range(len(timeline["ok"]))]}
    steps = [
        {"requested_rate_per_s": r, "achieved_rate_per_s": r * 0.98, "ttft_p50_ms": 20 * r, "ttft_p99_ms": 45 * r,
         "itl_p50_ms": 10 + r, "itl_p99_ms": 14 + r, "e2e_p50_ms": 900 + 50 * r, "e2e_p99_ms": 1500 + 90 * r}
        for r in (1.0, 2.0, 4.0)
    ]  # fmt: skip
    sweep = {"variants": [{"name": "baseline", "knee_rate_per_s": 2.0, "steps": steps}]}
    page = tmp_path / "all.html"
    page.write_text(render_html(report, sweep), encoding="utf-8")
    ids = _embedded_ids(page.read_text(encoding="utf-8"))
    assert {"comparison", "time-errors", "sweep-ttft", "sweep-itl", "sweep-e2e"} <= set(ids)
    _assert_drawn(_open(browser, page), ids)
    # The sweep's own page, as `loadgen sweep` writes it (sweep.html): its knees and the same curves.
    sweep |= {"scenario": "demo", "plan": {"by": "rate"}, "step_duration_s": 3, "exit_code": 0}
    own = tmp_path / "sweep.html"
    own.write_text(render_sweep_html(sweep), encoding="utf-8")
    ids = _embedded_ids(own.read_text(encoding="utf-8"))
    assert sorted(ids) == ["sweep-e2e", "sweep-itl", "sweep-ttft"]
    state = _open(browser, own)
    _assert_drawn(state, ids)
    assert state["sweep-ttft"]["datasets"] == 2 and state["sweep-ttft"]["elements"] == 6  # p50 and p99, 3 steps


def test_a_trend_of_five_reports_draws_offline(demo_dir: Path, browser: webdriver.Chrome, tmp_path: Path) -> None:
    report = json.loads((demo_dir / "report.json").read_text(encoding="utf-8"))
    files = []
    for night in range(5):
        report["generated_at"] = f"2026-11-{night + 1:02d}T02:00:00+00:00"
        files.append(tmp_path / f"night-{night}.json")
        files[-1].write_text(json.dumps(report), encoding="utf-8")
    out = tmp_path / "trend.html"
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "trend", *map(str, files), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    ids = _embedded_ids(out.read_text(encoding="utf-8"))
    state = _open(browser, out)
    _assert_drawn(state, ids)
    # A line per variant and statistic: 3 variants × p50 / p99, 5 points each.
    assert state["trend-ttft"]["datasets"] == 6 and state["trend-ttft"]["elements"] == 30


def test_a_page_that_makes_a_request_is_caught(browser: webdriver.Chrome, tmp_path: Path) -> None:
    page = tmp_path / "fetches.html"
    page.write_text('<!DOCTYPE html><img src="http://example.com/pixel.png"><p>hi</p>', encoding="utf-8")
    network_events(browser)
    browser.get(page.as_uri())
    events = network_events(browser)
    assert any(e.get("url") == "http://example.com/pixel.png" for e in events), events
    assert any(e["method"] == "Network.loadingFailed" for e in events), events  # and the network is off


def test_the_request_timeline_draws_its_lanes(demo_dir: Path, browser: webdriver.Chrome) -> None:
    """The demo's report as it is: one SVG of lanes per variant, every sampled request a lane laid out inside it,
    each bar a visible box in its colour."""
    report = json.loads((demo_dir / "report.json").read_text(encoding="utf-8"))
    expected = {v["name"]: len(v["requests"]) for v in report["request_timeline"]["variants"] if v["requests"]}
    assert len(expected) == 3 and all(n > 0 for n in expected.values()), expected
    _open(browser, demo_dir / "report.html")
    drawn = browser.execute_script(
        """
        return [...document.querySelectorAll('svg.request-timeline')].map(svg => {
          const box = svg.getBoundingClientRect();
          const bars = [...svg.querySelectorAll('rect')].map(r => r.getBoundingClientRect());
          const inside = bars.every(b => b.width > 0 && b.height > 0 && b.left >= box.left - 1
                                         && b.right <= box.right + 1 && b.bottom <= box.bottom + 1);
          const fills = new Set([...svg.querySelectorAll('rect.ttft, rect.decode')].map(
            r => getComputedStyle(r).fill));
          return {variant: svg.dataset.variant, width: box.width, height: box.height,
                  lanes: svg.querySelectorAll('g.lane').length, bars: bars.length, inside, fills: fills.size};
        });
        """
    )
    assert {d["variant"]: d["lanes"] for d in drawn} == expected
    for d in drawn:
        assert d["width"] > 300 and d["height"] > 50 and d["inside"] and d["bars"] >= d["lanes"], d
        assert d["fills"] == 2, d  # sent → first token and first token → done, in their two colours


# An E2E CDF from 100 ms to 6 s, the width of the narrowest chart the page lays out (its grid's 560 px).
_LOG_AXIS_CHART = """
var box = document.createElement("div");
box.className = "box"; box.style.width = "560px";
var canvas = document.createElement("canvas");
box.appendChild(canvas); document.body.appendChild(box);
var points = [100, 180, 400, 900, 1500, 2600, 4200, 5200, 6000].map(function (x, i) { return {x: x, y: i / 8}; });
var config = {type: "scatter", data: {datasets: [{label: "e2e", data: points, showLine: true}]},
              options: {scales: {x: {type: "logarithmic"}, y: {min: 0}}}};
if (arguments[0]) window.loadgenDraw(canvas, config);
else { config.options.plugins = {loadgenTickLabels: false}; new Chart(canvas, config); }
return canvas;
"""


def test_log_axis_tick_labels_do_not_collide(demo_dir: Path, browser: webdriver.Chrome) -> None:
    """Chart.js labels a log axis's ticks at 1, 2, 3, 5 and 15 times a power of ten and every tick of its last fifth:
    "5,000" and "6,000" printed into each other ("5,0006,000"). The report's own drawing labels decades, 5s and 2s
    and drops whatever would touch a label kept before it; the same check sees Chart.js's default collide."""
    _open(browser, demo_dir / "report.html")
    stock = tick_labels(browser, browser.execute_script(_LOG_AXIS_CHART, False))
    x = next(iter(stock.values()))["x"]
    assert "5,000 | 6,000" in x["overlaps"], x  # the check can fail
    ours = tick_labels(browser, browser.execute_script(_LOG_AXIS_CHART, True))
    x = next(iter(ours.values()))["x"]
    assert x["overlaps"] == [] and {"100", "1,000"} <= set(x["labels"]), x
    assert all(label in ("100", "200", "500", "1,000", "2,000", "5,000") for label in x["labels"]), x


def test_the_agent_sessions_timeline_draws(browser: webdriver.Chrome, tmp_path: Path) -> None:
    """A report with agent sessions (two variants on the same tasks, a sub-agent each): its Agent sessions section's
    timelines draw as every other chart, a bar laid out per step part, their row labels clear of each other."""
    from loadgen.report.sessions_html import timeline_charts
    from tests.unit.test_session_timelines import _report

    report = _report()
    page = tmp_path / "sessions.html"
    page.write_text(render_html(report), encoding="utf-8")
    ids = _embedded_ids(page.read_text(encoding="utf-8"))
    timelines = [i for i in ids if i.startswith("session-timeline-")]
    assert timelines == ["session-timeline-0", "session-timeline-1"]
    state = _open(browser, page)
    _assert_drawn(state, ids)
    for i, v in zip(timelines, report["variants"], strict=True):
        steps = [s for task in v["sessions_timeline"]["sessions"] for s in task["steps"]]
        # Its TTFT, the rest of its reply, its tools: each when there was one.
        parts = sum((ttft is not None) + (done is not None) + bool(tool) for *_, ttft, done, tool in steps)
        assert state[i]["datasets"] == 3 and state[i]["elements"] == parts, state[i]
    labels = tick_labels(browser)
    assert all(labels[i]["y"]["overlaps"] == [] for i in timelines), {i: labels[i]["y"] for i in timelines}
    rows = timeline_charts(report)[0]["config"]["data"]["labels"]
    assert all(labels[i]["y"]["labels"] == rows for i in timelines)  # every row named, in order
