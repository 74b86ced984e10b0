"""Locust glue of the live metrics: the exporter's /metrics (on the web UI and on `--metrics-port`), the Pushgateway
push at the end of a headless run (`--pushgateway URL`), and the master's scraping of each variant's own /metrics.

Only the process that merges (a master, or a process that is its own master) exports and scrapes: workers never
do, so each server is read from one place (llama.cpp's throughput gauges reset on every read). The web UI's
/metrics is not behind `--web-login`: Prometheus cannot pass Locust's login form, and the route serves only
aggregate numbers (no prompts, URLs or keys); a deployment that must hide it scrapes `--metrics-port` instead.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import TYPE_CHECKING, Any

import gevent
from locust import events
from locust.env import Environment
from locust.runners import MasterRunner, WorkerRunner

from loadgen.live.exporter import CONTENT_TYPE, LiveView, MetricsText, push_final
from loadgen.live.server_metrics import ServerTimeline, metrics_url
from loadgen.locust_plugin import web_login
from loadgen.locust_plugin.runtime import runtime_of
from loadgen.locust_plugin.server_scrape import SCRAPE_TIMEOUT_S as _SCRAPE_TIMEOUT
from loadgen.locust_plugin.server_scrape import scrape_loop as _scrape_loop
from loadgen.measure.health import HealthThresholds
from loadgen.report.server_split import latency_split

if TYPE_CHECKING:
    from loadgen.config.scenario import Variant
    from loadgen.k8s.pod_metrics import ServicePods

__all__ = ["attach_server_metrics", "register"]

log = logging.getLogger("loadgen")


class ExporterState:
    """The master's exporter and scrapers, one per Locust environment."""

    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        scenario = runtime_of(environment).scenario
        self.text = MetricsText(self.view, scenario.metrics.buckets_s)
        self.timelines: dict[str, ServerTimeline] = {}
        self.scrapers: list[gevent.Greenlet] = []
        self.server: Any = None
        self.pushed_run: int | None = None
        # Each variant's pod lister, connected before any run starts (`ServicePods.prepare`) and kept across runs.
        self.pods: dict[str, ServicePods | None] = {}
        if scenario.metrics.server_scrape_interval > 0:
            for v in scenario.variants:
                self._pods_of(v)

    def _pods_of(self, variant: Variant) -> ServicePods | None:
        """The variant's `pod_source`, made (and connected) once."""
        if variant.name not in self.pods:
            from loadgen.k8s.pod_metrics import pod_source

            source = self.pods[variant.name] = pod_source(variant)
            if source is not None:
                source.prepare()
        return self.pods[variant.name]

    def view(self) -> LiveView | None:
        env = self.environment
        rt = getattr(env, "loadgen", None)
        col = rt.collector if rt is not None else None
        if rt is None or col is None or col.started_wall is None:
            return None
        runner = env.runner
        thresholds = HealthThresholds(**rt.scenario.run_trust.model_dump())
        started = _utc_stamp(col.started_wall)
        since = col.started_wall + rt.scenario.load.warmup  # the window's start, wall clock
        # As the report's: no request times where several replicas answer behind one URL (their counters mix).
        times = {n: tl.request_times(since) for n, tl in self.timelines.items() if not tl.several_replicas()}
        window = col.measured_window(rt.scenario.load.warmup)  # the report's: agent sessions per hour over it
        if isinstance(runner, MasterRunner):
            health = {f"worker-{runner.get_worker_index(w)}": h for w, h in col.health.items()}
            running = col.sessions_in_flight()
            args = (rt.scenario.name, col.run, thresholds, started, times, window, running)
            return LiveView(col.aggregate, health, *args)
        running = dict(rt.tasks_running_by)  # a local run: its own tasks under way
        args = (rt.scenario.name, col.run, thresholds, started, times, window, running)
        if col.flushed:  # a local run that ended: its last delta is in the collector
            return LiveView(col.aggregate, dict(col.health), *args)
        rt.drain()  # a local run: its own aggregate, read in place (nothing is shipped before the end)
        return LiveView(rt.aggregate, {"local": rt.health}, *args)

    def start_scrapers(self) -> None:
        self.stop_scrapers()
        scenario = runtime_of(self.environment).scenario
        every = scenario.metrics.server_scrape_interval
        self.timelines = {}
        if every <= 0:
            return
        for v in scenario.variants:
            tl = self.timelines[v.name] = ServerTimeline(metrics_url(v.base_url), every)
            # Pod by pod where the variant's Service can be listed (server_scrape.py), else through its URL.
            self.scrapers.append(gevent.spawn(_scrape_loop, tl, every, self._pods_of(v)))

    def stop_scrapers(self) -> None:
        if self.scrapers:
            gevent.killall(self.scrapers, block=True, timeout=_SCRAPE_TIMEOUT + 1)
        self.scrapers = []


def _utc_stamp(wall: float) -> str:
    """A run's start as `loadgen_run_info`'s `started` label: `20261201T190532Z`."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(wall))


def attach_server_metrics(environment: Environment, report: dict[str, Any]) -> None:
    """Each variant's server-metrics timeline into the report (`variants[].server_metrics`)."""
    state: ExporterState | None = getattr(environment, "loadgen_live", None)
    if state is None:
        return
    rt = runtime_of(environment)
    started = rt.collector.started_wall if rt.collector is not None else None
    since = None if started is None else started + rt.scenario.load.warmup  # the window's start, wall clock
    for v in report.get("variants", []):
        tl = state.timelines.get(v["name"])
        if tl is not None:
            v["server_metrics"] = tl.report(since)
            split = latency_split(v)  # the client's TTFT split by the server's request-time histograms
            if split is not None:
                v["latency_split"] = split


def _add_arguments(parser: Any) -> None:
    g = parser.add_argument_group("loadgen live metrics")
    g.add_argument(
        "--metrics-port",
        type=int,
        env_var="LOADGEN_METRICS_PORT",
        default=0,
        help="serve the Prometheus exporter's /metrics on this port (the master; 0: only on the web UI)",
    )
    g.add_argument(
        "--metrics-host",
        type=str,
        env_var="LOADGEN_METRICS_HOST",
        default="",
        help="interface for --metrics-port (default: all)",
    )
    g.add_argument(
        "--metrics-linger",
        type=float,
        env_var="LOADGEN_METRICS_LINGER",
        default=0.0,
        help="headless: keep serving --metrics-port this many seconds after the final report, so that a scrape "
        "catches the final figures",
    )
    g.add_argument(
        "--pushgateway",
        type=str,
        env_var="LOADGEN_PUSHGATEWAY",
        default="",
        help="push the final figures of the run to this Prometheus Pushgateway URL",
    )


def _on_init(environment: Environment, **_: Any) -> None:
    if isinstance(environment.runner, WorkerRunner) or getattr(environment, "loadgen", None) is None:
        return
    state = ExporterState(environment)
    environment.loadgen_live = state  # type: ignore[attr-defined]
    app = environment.web_ui.app if environment.web_ui is not None else None
    if app is not None:
        from flask import Response

        @app.route("/metrics")
        def _metrics() -> Any:
            return Response(state.text.render(), mimetype=None, content_type=CONTENT_TYPE)

    opts = environment.parsed_options
    port = int(getattr(opts, "metrics_port", 0) or 0)
    if port:
        from gevent.pywsgi import WSGIServer

        def wsgi(env: dict[str, Any], start_response: Any) -> list[bytes]:
            if env.get("PATH_INFO") != "/metrics":
                start_response("404 Not Found", [("Content-Type", "text/plain")])
                return [b"loadgen: the exporter is at /metrics\n"]
            body = state.text.render()
            start_response("200 OK", [("Content-Type", CONTENT_TYPE), ("Content-Length", str(len(body)))])
            return [body]

        state.server = WSGIServer((getattr(opts, "metrics_host", "") or "", port), wsgi, log=None)
        state.server.start()
        log.info("loadgen: Prometheus exporter on port %s at /metrics", port)


def _on_test_start(environment: Environment, **_: Any) -> None:
    state: ExporterState | None = getattr(environment, "loadgen_live", None)
    if state is not None:
        state.start_scrapers()


def _on_test_stop(environment: Environment, **_: Any) -> None:
    state: ExporterState | None = getattr(environment, "loadgen_live", None)
    if state is not None:
        state.stop_scrapers()


def _on_quitting(environment: Environment, **_: Any) -> None:
    """After the final report (loadgen's report listener runs first): push the final figures, close the port."""
    state: ExporterState | None = getattr(environment, "loadgen_live", None)
    if state is None:
        return
    state.stop_scrapers()
    opts = environment.parsed_options
    url = getattr(opts, "pushgateway", "") or ""
    rt = runtime_of(environment)
    col = rt.collector
    if url and col is not None and col.started_wall is not None and state.pushed_run != col.run:
        started = _utc_stamp(col.started_wall)
        try:
            push_final(url, state.text, rt.scenario.name)
            state.pushed_run = col.run
            log.info("loadgen: final figures pushed to %s (scenario=%s, started %s)", url, rt.scenario.name, started)
        except OSError as e:  # the report is written already; a Pushgateway that is down must not change the exit code
            log.error("loadgen: could not push to %s: %s", url, e)
    if state.server is not None:
        linger = float(getattr(opts, "metrics_linger", 0) or 0)
        if linger > 0:
            gevent.sleep(linger)  # the final figures stay scrapeable (a Job's last scrape would miss them otherwise)
        with contextlib.suppress(Exception):
            state.server.stop(timeout=1)


def register() -> None:
    """Attach the live-metrics listeners (after the plugin's own, so that the report is written before the push),
    and the web UI's login (web_login.py), which keeps /metrics outside it as this module's docstring says."""
    web_login.register()
    for hook, listener in (
        (events.init_command_line_parser, _add_arguments),
        (events.init, _on_init),
        (events.test_start, _on_test_start),
        (events.test_stop, _on_test_stop),
        (events.quitting, _on_quitting),
    ):
        with contextlib.suppress(ValueError):
            hook.remove_listener(listener)
        hook.add_listener(listener)
