"""A real browser for the end-to-end tier: Debian's headless Chromium, driven by Selenium through Debian's
chromedriver, with the network off.

`.ci/run` installs both (`apt-get install chromium chromium-driver`). A missing browser fails the test that asks for
one — like a missing llama.cpp (conftest.py), it must not pass as a skip. Selenium is given both paths, so its
Selenium Manager never tries to download a browser or a driver.

Network off: every request goes to a proxy on a port nothing listens on, and every host name resolves to nothing,
so a page that fetched anything would see it fail; the performance log (Chromium's DevTools Network events) lists
every request the page made, for the test to assert there was none.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.support.ui import WebDriverWait

CHROMIUM = "chromium"
CHROMEDRIVER = "chromedriver"
NETWORK_OFF = ("--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>", "--host-resolver-rules=MAP * ~NOTFOUND")
# For a page served on loopback (Locust's web UI): the same dead proxy and dead names, but loopback addresses go
# direct (Chromium's default bypass, which `<-loopback>` above removes) — the only network the page can reach.
LOOPBACK_ONLY = ("--proxy-server=127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1")


@contextmanager
def chromium(width: int = 1300, height: int = 1000, loopback: bool = False) -> Iterator[webdriver.Chrome]:
    """`loopback`: let the page reach 127.0.0.1 (and nothing else); by default it reaches nothing at all."""
    browser, driver = shutil.which(CHROMIUM), shutil.which(CHROMEDRIVER)
    assert browser and driver, (
        f"headless Chromium is needed: {CHROMIUM}={browser}, {CHROMEDRIVER}={driver}; "
        "install Debian's chromium and chromium-driver (.ci/run does)"
    )
    opts = webdriver.ChromeOptions()
    opts.binary_location = browser
    for arg in (
        "--headless=new",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        f"--window-size={width},{height}",
        # The browser's own background traffic (updates, safe browsing, sync) is not the page's; keep it quiet.
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        *(LOOPBACK_ONLY if loopback else NETWORK_OFF),
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(service=Service(driver), options=opts)
    try:
        yield drv
    finally:
        drv.quit()


def wait_loaded(drv: webdriver.Chrome, timeout: float = 30.0) -> None:
    """Until the page has loaded (`document.readyState` complete): `get()` usually returns then, but on a busy
    2-core machine it has returned while a large inlined page was still parsing."""
    WebDriverWait(drv, timeout, poll_frequency=0.1).until(
        lambda d: d.execute_script("return document.readyState") == "complete"
    )


def network_events(drv: webdriver.Chrome) -> list[dict[str, Any]]:
    """The Network events logged since the last call: (method, url or error) of every request the page made."""
    out = []
    for entry in drv.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        method, params = msg.get("method", ""), msg.get("params", {})
        if method == "Network.requestWillBeSent":
            out.append({"method": method, "url": params["request"]["url"]})
        elif method == "Network.loadingFailed":
            out.append({"method": method, "error": params.get("errorText"), "blocked": params.get("blockedReason")})
    return out


# Per canvas: the chart object Chart.js made for it, how many data elements it laid out, and how many pixels of its
# plot area (inside the axes, so not the legend's swatches) have the colour of one of its series: a chart with axes
# but no data has none.
CHART_STATE_JS = """
function rgb(c) {
  if (typeof c !== "string" || c[0] !== "#" || c.length !== 7) return null;  // #rrggbb only: no alpha
  return [1, 3, 5].map(function (i) { return parseInt(c.slice(i, i + 2), 16); });
}
return Array.from(document.querySelectorAll("canvas")).map(function (canvas) {
  var chart = Chart.getChart(canvas);
  if (!chart) return {id: canvas.id, chart: false};
  var colours = [];
  chart.data.datasets.forEach(function (ds) {
    [].concat(ds.borderColor || [], ds.backgroundColor || []).forEach(function (c) {
      var v = rgb(c); if (v) colours.push(v);
    });
  });
  var elements = 0;
  chart.data.datasets.forEach(function (ds, i) {
    chart.getDatasetMeta(i).data.forEach(function (el) {
      if (isFinite(el.x) && isFinite(el.y)) elements++;
    });
  });
  var r = window.devicePixelRatio || 1, a = chart.chartArea;
  var x0 = Math.ceil(a.left * r), y0 = Math.ceil(a.top * r);
  var w = Math.floor(a.right * r) - x0, h = Math.floor(a.bottom * r) - y0;
  var px = canvas.getContext("2d").getImageData(x0, y0, w, h).data, painted = 0;
  for (var i = 0; i < px.length; i += 4) {
    if (px[i + 3] < 200) continue;
    for (var k = 0; k < colours.length; k++) {
      var c = colours[k];
      if (Math.abs(px[i] - c[0]) < 12 && Math.abs(px[i + 1] - c[1]) < 12 && Math.abs(px[i + 2] - c[2]) < 12) {
        painted++; break;
      }
    }
  }
  return {id: canvas.id, chart: true, datasets: chart.data.datasets.length, elements: elements,
          painted: painted, width: canvas.width, height: canvas.height};
});
"""


def chart_state(drv: webdriver.Chrome) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in drv.execute_script(CHART_STATE_JS)}


def severe_console(drv: webdriver.Chrome) -> list[str]:
    return [e["message"] for e in drv.get_log("browser") if e.get("level") == "SEVERE"]


# Per canvas and axis: the tick labels Chart.js will draw (after its own skipping and loadgen's), each at its pixel,
# and every pair of neighbours closer than their text needs: half of each one's width along a horizontal axis (the
# height of a line when the labels are rotated, over the sine of the angle), a line's height along a vertical one.
TICK_LABELS_JS = """
var canvases = arguments.length ? [arguments[0]] : Array.from(document.querySelectorAll("canvas"));
return canvases.map(function (canvas) {
  var chart = Chart.getChart(canvas), out = {};
  Object.keys(chart.scales).forEach(function (id) {
    var s = chart.scales[id], font = Chart.helpers.toFont(s.options.ticks.font), ctx = chart.ctx;
    var rot = (s.labelRotation || 0) * Math.PI / 180, labels = [];
    ctx.save(); ctx.font = font.string;
    s.getLabelItems().forEach(function (item) {
      var text = Array.isArray(item.label) ? item.label.join(" ") : String(item.label);
      if (!text) return;
      var at = s.isHorizontal() ? item.options.translation[0] : item.options.translation[1];
      labels.push({text: text, at: at, width: ctx.measureText(text).width});
    });
    ctx.restore();
    labels.sort(function (a, b) { return a.at - b.at; });
    var overlaps = [];
    for (var i = 1; i < labels.length; i++) {
      var a = labels[i - 1], b = labels[i], need;
      if (!s.isHorizontal()) need = font.lineHeight;
      else need = rot ? font.lineHeight / Math.sin(rot) : (a.width + b.width) / 2;
      if (b.at - a.at < need) overlaps.push(a.text + " | " + b.text);
    }
    out[id] = {type: s.type, labels: labels.map(function (l) { return l.text; }), overlaps: overlaps};
  });
  return {id: canvas.id, axes: out};
});
"""


def tick_labels(drv: webdriver.Chrome, canvas: Any = None) -> dict[str, dict[str, dict[str, Any]]]:
    """{canvas id: {axis id: {type, labels, overlaps}}} of every chart on the page (or of `canvas` alone)."""
    args = [] if canvas is None else [canvas]
    return {c["id"]: c["axes"] for c in drv.execute_script(TICK_LABELS_JS, *args)}
