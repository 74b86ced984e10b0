"""The web UI's charts page (`/loadgen/charts`): TTFT and E2E p50 / p99 per bin, output tokens/s over time per
variant, and errors by class, from the live summary's `variants[].timeline` — the same per-variant timeline the
HTML report draws.

A bin is drawn once it has settled. While the run goes on, the newest bins are still filling: the master has each
worker's requests only up to its last report (every few seconds), and a request adds its tokens to the seconds its
chunks arrived only when it completes, so a stream still running has not yet counted in the bins it spans. Drawn,
those bins would read as a sudden drop in tokens/s. So the page leaves out, per variant, the bins that ended less
than a worker's report interval plus the variant's E2E p99 ago (`charts_data`); after the stop every bin is final
and drawn.

Locust's extension tabs draw tables only, so the charts are a page of loadgen's own, linked from the LLM tab. Like
the HTML report it is one self-contained page: Chart.js (the report's copy, loadgen/report/assets) inlined, no CDN,
so it draws on a machine without internet access. It asks its own origin for `charts.json` every few seconds and
redraws in place; after the stop it keeps the final numbers, and a new run starts its charts from zero.
"""

from __future__ import annotations

import json
import math
from importlib.resources import files
from typing import Any

__all__ = ["REFRESH_S", "charts_data", "render_charts_page", "settled_bins"]

REFRESH_S = 3
# #rrggbb, one per variant (as in the HTML report's palette: distinct under the common colour-vision deficiencies).
PALETTE = ["#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442", "#000000"]

_SCRIPT = r"""
(function () {
  "use strict";
  window.loadgenChartErrors = [];
  window.loadgenChartUpdates = 0;
  var cfg = JSON.parse(document.getElementById("loadgen-charts-config").textContent);
  var charts = {};
  // [canvas, title, [[column, label suffix, dashed], …]]; no column: errors, one series per variant and class.
  var specs = [
    ["time-ttft", "TTFT per bin (ms): p50 solid, p99 dashed", [["ttft_p50_ms", " p50", false],
                                                               ["ttft_p99_ms", " p99", true]]],
    ["time-e2e", "E2E per bin (ms): p50 solid, p99 dashed", [["e2e_p50_ms", " p50", false],
                                                             ["e2e_p99_ms", " p99", true]]],
    ["time-tokens", "Output tokens/s", [["output_tokens_per_s", "", false]]],
    ["time-errors", "Errors per bin, by variant and class", null]
  ];
  function points(tl, values, t0) {
    var out = [];
    for (var i = 0; i < values.length; i++) {
      if (values[i] !== null) out.push({x: tl.start_unix_s + i * tl.bin_s - t0, y: values[i]});
    }
    return out;
  }
  function datasets(data, columns) {
    var out = [], k = 0;
    data.variants.forEach(function (v, i) {
      var tl = v.timeline, t0 = data.start_unix_s;
      if (!tl || tl.start_unix_s === null) return;
      if (columns) {
        var c = cfg.palette[i % cfg.palette.length];
        columns.forEach(function (col) {
          out.push({label: v.name + col[1], data: points(tl, tl[col[0]], t0), borderColor: c, backgroundColor: c,
                    borderDash: col[2] ? [6, 4] : [], pointRadius: 2, spanGaps: true});
        });
      } else {
        Object.keys(tl.errors).sort().forEach(function (cls) {
          var c = cfg.palette[k++ % cfg.palette.length];
          out.push({label: v.name + " " + cls, data: points(tl, tl.errors[cls], t0), borderColor: c,
                    backgroundColor: c, pointRadius: 2});
        });
      }
    });
    return out;
  }
  function draw(data) {
    specs.forEach(function (s) {
      var ds = datasets(data, s[2]);
      if (!charts[s[0]]) {
        charts[s[0]] = new Chart(document.getElementById(s[0]), {
          type: "line",
          data: {datasets: ds},
          options: {animation: false, parsing: true, responsive: true, maintainAspectRatio: false,
                    plugins: {title: {display: true, text: s[1]}},
                    scales: {x: {type: "linear", title: {display: true, text: "seconds since the run started"}},
                             y: {beginAtZero: true}}}
        });
      } else {
        charts[s[0]].data.datasets = ds;
        charts[s[0]].update("none");
      }
    });
    var run = data.run;
    var filling = data.variants.filter(function (v) { return v.still_filling_bins; }).map(function (v) {
      return v.name + " " + v.still_filling_bins;
    });
    document.getElementById("status").textContent =
      "run " + run.run_number + (run.finished ? ", finished" : ", live") + " · window " + run.window_s + " s · " +
      (data.variants.map(function (v) { return v.name + " " + v.requests + " requests"; }).join(", ")) +
      (filling.length ? " · bins still filling, not drawn yet: " + filling.join(", ") : "") +
      " · updated " + new Date().toLocaleTimeString();
    window.loadgenChartUpdates++;
  }
  function poll() {
    fetch(cfg.data_url, {cache: "no-store", credentials: "same-origin"})
      .then(function (r) { if (!r.ok) throw new Error(cfg.data_url + ": HTTP " + r.status); return r.json(); })
      .then(draw)
      .catch(function (e) { window.loadgenChartErrors.push(String(e));
                            document.getElementById("status").textContent = String(e); });
  }
  poll();
  setInterval(poll, cfg.refresh_s * 1000);
})();
"""

_STYLE = """
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(560px, 1fr)); gap: 1.5em; }
.cell { position: relative; height: 320px; }
#status { color: #555; margin: .5em 0 1em; }
"""


def _chart_js() -> str:
    return files("loadgen.report").joinpath("assets", "chart.umd.min.js").read_text(encoding="utf-8")


def _e2e_p99_s(variant: dict[str, Any]) -> float:
    """The variant's E2E p99 so far, in s: how long after a bin a request that streamed in it may still complete
    (0 when unknown: no request yet, or the tail censored among failures)."""
    p99 = ((variant.get("overall") or {}).get("metrics_ms", {}).get("e2e") or {}).get("p99")
    return float(p99) / 1e3 if isinstance(p99, int | float) else 0.0


def settled_bins(timeline: dict[str, Any], now_unix_s: float, settle_s: float) -> int:
    """How many of the timeline's bins (from the first) ended at least `settle_s` before `now_unix_s`."""
    start, width, n = timeline.get("start_unix_s"), timeline.get("bin_s") or 1, len(timeline.get("ok") or [])
    if start is None:
        return 0
    return max(0, min(n, math.floor((now_unix_s - settle_s - start) / width)))


def _cut(timeline: dict[str, Any], keep: int) -> dict[str, Any]:
    """The timeline's first `keep` bins: every column cut alike."""
    out: dict[str, Any] = {}
    for key, value in timeline.items():
        if isinstance(value, list):
            out[key] = value[:keep]
        elif isinstance(value, dict):
            out[key] = {k: v[:keep] for k, v in value.items()}
        else:
            out[key] = value
    return out


def charts_data(summary: dict[str, Any], now_unix_s: float | None = None, report_lag_s: float = 0.0) -> dict[str, Any]:
    """What the page polls: each variant's timeline and request count, the run's number and state, and the
    earliest bin start (the time axis counts from it). While the run goes on and `now_unix_s` is given, each
    variant's timeline ends at its last settled bin (one that ended `report_lag_s` — how stale the master's view of
    a worker may be — plus the variant's E2E p99 ago); `still_filling_bins` counts those left out."""
    starts = [v["timeline"]["start_unix_s"] for v in summary["variants"] if v["timeline"].get("start_unix_s")]
    run = summary["run"]
    live = now_unix_s is not None and not run.get("finished")
    variants = []
    for v in summary["variants"]:
        timeline, left_out = v["timeline"], 0
        if live and now_unix_s is not None:
            keep = settled_bins(timeline, now_unix_s, report_lag_s + _e2e_p99_s(v))
            left_out = len(timeline.get("ok") or []) - keep
            timeline = _cut(timeline, keep)
        variants.append(
            {
                "name": v["name"],
                "requests": v["overall"]["requests"],
                "timeline": timeline,
                "still_filling_bins": left_out,
            }
        )
    return {
        "start_unix_s": min(starts) if starts else 0,
        "run": {k: run.get(k) for k in ("run_number", "finished", "window_s")},
        "variants": variants,
    }


def render_charts_page(scenario_name: str, data_url: str = "charts.json") -> str:
    cfg = {"data_url": data_url, "refresh_s": REFRESH_S, "palette": PALETTE}
    # "</" cannot end the script block early inside JSON text.
    config = json.dumps(cfg).replace("</", "<\\/")
    title = scenario_name.replace("&", "&amp;").replace("<", "&lt;")
    canvases = "".join(
        f'<div class="cell"><canvas id="{cid}"></canvas></div>'
        for cid in ("time-ttft", "time-e2e", "time-tokens", "time-errors")
    )
    return (
        "<!doctype html><html><head><meta charset='utf-8'><link rel='icon' href='data:,'>"
        f"<title>loadgen · {title} · charts</title><style>{_STYLE}</style></head><body>"
        f"<h1>{title}: over time</h1><p><a href='../'>← Locust</a> · <a href='report'>report so far</a> · "
        "<a href='report.json'>report.json</a></p><div id='status'>loading…</div>"
        f"<div class='grid'>{canvases}</div>"
        f'<script type="application/json" id="loadgen-charts-config">{config}</script>'
        f"<script>{_chart_js()}</script><script>{_SCRIPT}</script></body></html>"
    )
