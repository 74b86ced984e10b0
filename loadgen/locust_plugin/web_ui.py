"""loadgen in Locust's web UI: the LLM tabs, the charts page and the report routes, all behind `--web-login`.

The tabs use Locust's own extension points: `extended_tabs` / `extended_tables` in the page's template arguments
(kept across `update_template_args`, which merges), and the rows as `extended_stats` added to the `/stats/requests`
JSON the page polls every 2 s (an `after_request` hook, as Locust's examples/extend_web_ui.py does). The tab's page
renders text only, so the link to the charts page is a small script added to Locust's index page, shown on the LLM
tabs; the charts page itself (live/charts_page.py) is linked from Locust's Download Data tab too.

Cost: the rows come from the live summary (live/summary.py), computed at most once per `_CACHE_S` (or per 20 times
its own cost, if longer) and shared by every poller (the tab, the charts page, several browsers) — `python -m
bench.live_view` prints what one costs.
The report so far (`/loadgen/report`) is the HTML report's own page (report/html.py), rendered from the same report
dict as report.html, reloading itself while the run goes on (a meta refresh: no script of ours in it) and final once
it is over; its JSON and Markdown are beside it (`report.json`, `report.md`). A page is cached for as long as it
asks the browser to wait, so several open browsers cost one report.
Every route is wrapped by `auth_required_if_enabled`, so with `--web-login` none answers without a login; Locust's
own `/stats/requests` (which carries the rows) is wrapped by Locust already.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import orjson
from flask import Response, request
from locust.env import Environment
from locust.runners import WORKER_REPORT_INTERVAL, MasterRunner

from loadgen.live.charts_page import charts_data, render_charts_page
from loadgen.live.web_rows import LLM_TAB, SESSIONS_TAB, TABLES, WORKERS_TAB, extended_stats, tabs_for
from loadgen.locust_plugin.live_state import current_report, live_summary
from loadgen.locust_plugin.runtime import runtime_of
from loadgen.report.html import render_html
from loadgen.report.markdown import render_markdown

__all__ = ["ROUTES", "install_web_ui"]

ROUTES = ("/loadgen/report.json", "/loadgen/report", "/loadgen/report.md", "/loadgen/charts", "/loadgen/charts.json")
# The page polls every 2 s; a summary younger than this is served again (a finished run's is kept until the next).
_CACHE_S = 1.0
# ... and never recomputed sooner than this many times its own cost: a big run's summary (10 variants × 5 mixes:
# ~100-170 ms on these machines) then takes at most 5 % of the master's loop, whatever polls it.
_COST_FACTOR = 20
# The live report page (/loadgen/report) reloads itself this often at least while the run goes on.
_REPORT_REFRESH_S = 5

T = TypeVar("T")

_LINK_SCRIPT = f"""<script>
(function () {{
  // Locust's tab pages render table cells as text: the charts page's link lives outside its React root.
  var a = document.createElement("a");
  a.id = "loadgen-charts-link"; a.href = "./loadgen/charts"; a.target = "_blank";
  a.textContent = "LLM charts over time \\u2197";
  a.style.cssText = "position:fixed;right:16px;bottom:12px;z-index:2000;padding:6px 10px;border-radius:4px;" +
    "background:#1976d2;color:#fff;font:14px sans-serif;text-decoration:none;display:none";
  document.body.appendChild(a);
  setInterval(function () {{
    var tab = new URLSearchParams(location.search).get("tab");
    a.style.display = ["{LLM_TAB}", "{WORKERS_TAB}", "{SESSIONS_TAB}"].indexOf(tab) >= 0 ? "block" : "none";
  }}, 500);
}})();
</script>"""


class _Cached(Generic[T]):
    """What `compute` makes of the run now, recomputed at most every `min_s` (or `_COST_FACTOR` times its own cost,
    if longer), and once more when the run's number or state changes (a stop shows its final numbers at once; a new
    run restarts from zero at once)."""

    def __init__(self, environment: Environment, compute: Callable[[Environment], T], min_s: float) -> None:
        self.env = environment
        self.compute = compute
        self.min_s = min_s
        self.key: tuple[Any, ...] | None = None
        self.at = 0.0
        self.value: T | None = None
        self.last_cost_s = 0.0

    def every_s(self) -> float:
        """How long a value is served again: what a page polling it may as well wait."""
        return max(self.min_s, _COST_FACTOR * self.last_cost_s)

    def get(self) -> T:
        col = runtime_of(self.env).collector
        key = (id(col), col.flushed if col else None, col.stopped_wall is None if col else None)
        now = time.monotonic()
        if self.value is None or key != self.key or (not key[1] and now - self.at >= self.every_s()):
            t = time.perf_counter()
            self.value = self.compute(self.env)
            self.last_cost_s = time.perf_counter() - t
            self.key, self.at = key, now
        return self.value


def _report_page(environment: Environment) -> str:
    """The report so far as the HTML report's page (report.html's, from the same report dict). While the run goes
    on, the page reloads itself every `_REPORT_REFRESH_S`, or `_COST_FACTOR` times what building the report cost if
    longer (a big run's report costs the master seconds); once the run is over the page is final and stays."""
    t = time.perf_counter()
    report = current_report(environment)
    cost = time.perf_counter() - t
    live = not report["run"].get("finished", True)
    return render_html(report, refresh_s=math.ceil(max(_REPORT_REFRESH_S, _COST_FACTOR * cost)) if live else None)


def install_web_ui(environment: Environment) -> None:
    web_ui = environment.web_ui
    if web_ui is None:
        return
    app = web_ui.app
    if app is None:
        return
    auth: Callable[[Callable[..., Any]], Callable[..., Any]] = web_ui.auth_required_if_enabled
    cache = _Cached(environment, live_summary, _CACHE_S)
    # Pages cached as long as they ask the browser to wait (several browsers then cost one report).
    report_page = _Cached(environment, _report_page, _REPORT_REFRESH_S)
    scenario = runtime_of(environment).scenario
    web_ui.template_args["extended_tabs"] = tabs_for(any(m.agent is not None for m in scenario.traffic.mixes))
    web_ui.template_args["extended_tables"] = TABLES
    web_ui.template_args["extended_csv_files"] = [
        {"href": "./loadgen/charts", "title": "LLM charts over time (loadgen)"},
        {"href": "./loadgen/report", "title": "loadgen report so far (HTML, reloads while the run goes on)"},
        {"href": "./loadgen/report.json", "title": "loadgen report so far (JSON)"},
        {"href": "./loadgen/report.md", "title": "loadgen report so far (Markdown)"},
    ]

    def _json(obj: Any) -> Response:
        return Response(orjson.dumps(obj), mimetype="application/json")

    @app.after_request
    def _extend(response: Response) -> Response:
        if request.path == "/stats/requests" and response.status_code == 200 and response.is_json:
            if runtime_of(environment).collector is not None:
                body = orjson.loads(response.get_data())
                body["extended_stats"] = extended_stats(cache.get())
                response.set_data(orjson.dumps(body))
        elif request.path == "/" and response.status_code == 200 and response.mimetype == "text/html":
            page = response.get_data(as_text=True)
            if "</body>" in page:
                response.set_data(page.replace("</body>", _LINK_SCRIPT + "</body>", 1))
        return response

    def _report_json() -> Any:
        return _json(current_report(environment))

    def _report_html() -> Any:
        return Response(report_page.get(), mimetype="text/html")

    def _report_md() -> Any:
        return Response(render_markdown(current_report(environment)), mimetype="text/markdown; charset=utf-8")

    def _charts() -> Any:
        return Response(render_charts_page(runtime_of(environment).scenario.name), mimetype="text/html")

    def _charts_json() -> Any:
        # A master sees each worker's requests up to its last report: the newest bins settle that much later.
        lag = WORKER_REPORT_INTERVAL if isinstance(environment.runner, MasterRunner) else 0.0
        return _json(charts_data(cache.get(), now_unix_s=time.time(), report_lag_s=lag))

    for rule, view in zip(ROUTES, (_report_json, _report_html, _report_md, _charts, _charts_json), strict=True):
        app.add_url_rule(rule, endpoint=f"loadgen_{view.__name__.strip('_')}", view_func=auth(view))
