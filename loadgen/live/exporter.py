"""The master's Prometheus exporter: reads the merged aggregate at scrape time and renders the text exposition.

Nothing is updated per request. Each scrape walks the (variant, mix) groups of the collector's aggregate and turns
their exact HDR histograms into Prometheus histograms — cumulative bucket counts, exact: a sample counts in `le=b`
when the value `percentile` reports for it (its HDR bucket's highest value) is ≤ b, the complement of
`LatencyHistogram.count_above(b)` — and the exact HDR percentiles into gauges. Failed requests with no TTFT / E2E
are not histogram samples; `loadgen_censored_samples_total` counts them, and a quantile gauge whose rank falls among
them is +Inf (the report's "censored"). Agent sessions (a mix with `agent`) are the report's own figures
(report/sessions.py `session_figures`): their samples appear only once a session has ended, their families always.

Cost (bench/exporter.py): prometheus_client's per-sample formatting is ~10 µs a sample, and 10 variants × 5 mixes
are ~7,000 samples, so the scrape path renders the text itself (`MetricsText.render`), walks each histogram's counts
in place in one C pass (measure/hist_walk.py; numpy where the C is not built; sums in integer µs, slots found by an
inline index), fills each histogram's lines from one format string built once per group, and reuses a group's
rendered lines while nothing in it changed. For
`push_to_gateway`, which wants a `CollectorRegistry`, `exporter_registry` wraps the same text in a collector of
its own registry (no prometheus_client globals).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, push_to_gateway
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from loadgen.measure.aggregate import Aggregate, GroupStats
from loadgen.measure.health import HealthStats, HealthThresholds, verdict
from loadgen.measure.hist_walk import Scratch, walk
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.sessions import SessionFate
from loadgen.metric_names import PERCENTILES
from loadgen.report.server_split import split_ttft
from loadgen.report.sessions import session_figures

__all__ = ["CONTENT_TYPE", "FAMILIES", "LiveView", "MetricsText", "exporter_registry", "push_final"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Which of the aggregate's latencies become Prometheus histograms (and quantile gauges).
_HISTOGRAMS: tuple[tuple[str, str], ...] = (
    ("ttft", "Time to first token: from the request write to the first chunk carrying a generated token."),
    ("itl", "Inter-token latency, one sample per token (a chunk of k tokens after a gap g gives k samples of g/k)."),
    ("tpot", "Time per output token after the first, one sample per reply that ended (censored for one that did not)."),
    ("e2e", "End-to-end request time, from the request write to the last byte."),
)
# The parts of `loadgen_server_ttft_split_seconds` and the latency_split keys they show.
_SPLIT_PARTS = (
    ("client_ttft", "client_ttft_ms"),
    ("server_ttft", "server_ttft_ms"),
    ("network_client", "network_client_ms"),
    ("queue", "queue_ms"),
    ("prefill", "prefill_ms"),
)
_QUANTILES = tuple((round(p / 100.0, 6), repr(round(p / 100.0, 6))) for _, p in PERCENTILES)

# (name, type, help) of every family, in exposition order: the one list of what is exported.
FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("loadgen_requests", "counter", "Requests completed in the measured window, by outcome (ok / error)."),
    (
        "loadgen_requests_excluded",
        "counter",
        "Requests outside the measured window or its outcomes: warm-up, cut by the stop, or cancelled by the client.",
    ),
    (
        "loadgen_requests_by_fate",
        "counter",
        "Every request by how it ended (docs/reference/fates.md: succeeded, drained, failed, timed_out, cut_at_stop, "
        "cancelled_by_time, cancelled_by_tokens, not_sent, in_warmup), each counted once.",
    ),
    ("loadgen_errors", "counter", "Failed requests by error class."),
    ("loadgen_output_tokens", "counter", "Output tokens streamed in the measured window."),
    ("loadgen_prompt_tokens", "counter", "Prompt tokens the servers reported (usage)."),
    ("loadgen_goodput_requests", "counter", "Successful requests that met every per-request SLO (goodput:)."),
    ("loadgen_censored_samples", "counter", "Failed requests that never reached the point a latency ends at."),
    *((f"loadgen_{m}_seconds", "histogram", doc) for m, doc in _HISTOGRAMS),
    *(
        (f"loadgen_{m}_quantile_seconds", "gauge", f"Exact HDR percentile (within 0.1 %) of {m}; +Inf when censored.")
        for m, _ in _HISTOGRAMS
    ),
    ("loadgen_class_requests", "counter", "Requests of each priority class, by outcome."),
    ("loadgen_class_latency_quantile_seconds", "gauge", "Exact HDR percentile of one priority class's latency."),
    (
        "loadgen_sessions",
        "counter",
        "Agent sessions (tasks of a mix with `agent`) that ended, by fate: completed, failed, cut, not_sent, "
        "in_warmup (the report's sessions.fates).",
    ),
    (
        "loadgen_session_duration_quantile_seconds",
        "gauge",
        "Exact HDR percentile of completed agent sessions' duration, failed / cut / unsent ones censored above "
        "them; +Inf when censored.",
    ),
    ("loadgen_sessions_per_hour", "gauge", "Agent sessions completed inside the window so far, per hour of it."),
    (
        "loadgen_sessions_in_flight",
        "gauge",
        "Agent sessions under way now: tasks started and not yet ended, on every worker (their latest report).",
    ),
    (
        "loadgen_session_time_share_ratio",
        "gauge",
        "Where completed agent sessions' time went: part = model, tools, subagents (the three add up to 1).",
    ),
    (
        "loadgen_session_goodput_ratio",
        "gauge",
        "Share of the window's agent sessions that completed with every step within every per-request SLO.",
    ),
    (
        "loadgen_server_ttft_split_seconds",
        "gauge",
        "The client's mean TTFT over the window split by the server's own request times (the report's "
        "latency_split): part = client_ttft, server_ttft, network_client, queue, prefill.",
    ),
    (
        "loadgen_server_queue_share_ratio",
        "gauge",
        "The server's mean queue time as a share of the client's mean TTFT (0.5 or more: queueing dominates).",
    ),
    ("loadgen_worker_loop_lag_p99_seconds", "gauge", "p99 of a worker's event-loop lag."),
    ("loadgen_worker_schedule_slip_p99_seconds", "gauge", "Open loop: p99 of how late a worker sent after schedule."),
    ("loadgen_worker_cpu_p90_ratio", "gauge", "p90 of a worker process's CPU use (1 = one core)."),
    ("loadgen_run_untrustworthy_reasons", "gauge", "Run-trust thresholds the workers' measurements exceed (0: ok)."),
    ("loadgen_run_info", "gauge", "The run being exported (always 1), its UTC start in `started`."),
)
_GROUP_FAMILIES = [name for name, _, _ in FAMILIES[: 8 + 2 * len(_HISTOGRAMS)]]


@dataclass
class LiveView:
    """What one scrape reads: the master's merged aggregate, each worker's health (by its report label), the run."""

    aggregate: Aggregate
    health: dict[str, HealthStats]
    scenario: str
    run: int
    thresholds: HealthThresholds | None = None
    started: str = ""  # the run's UTC start (`20261201T190532Z`): a label of loadgen_run_info, not a grouping key
    # Per variant, the server's mean request times over the window so far (`ServerTimeline.request_times`).
    server_times: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    # The measured window so far (s), as the report's: what agent sessions per hour are counted over.
    window_s: float = 0.0
    # Agent tasks under way by (variant, mix): the workers' latest counts (a local run's own).
    sessions_in_flight: dict[tuple[str, str], int] = field(default_factory=dict)


@dataclass(slots=True)
class HistFigures:
    buckets: list[int]  # cumulative, one per bound, then +Inf
    sum_s: float
    quantiles: list[float]  # seconds per _QUANTILES; +Inf where censored; empty for an empty histogram


@dataclass(frozen=True, slots=True)
class _Layout:
    """One HDR layout's per-slot highest (float) and median (integer) equivalent values (µs), per bound how many
    slots from index 0 have a highest value ≤ it (what counts in `le`), its inline value → slot function, and
    scratch space for one histogram's walk (a scrape walks one at a time)."""

    highest: np.ndarray
    median: np.ndarray
    ends: np.ndarray
    index: Callable[[int], int]
    last: int
    scratch: Scratch  # for the numpy walk (where the C one is not built)


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _num(v: float) -> str:
    if isinstance(v, int):
        return str(v)
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


class MetricsText:
    """Renders the exposition of `source()` (None: no run yet — the headers only)."""

    def __init__(self, source: Callable[[], LiveView | None], buckets_s: Sequence[float]) -> None:
        self._source = source
        self._bounds = [float(b) for b in buckets_s]
        self._le = [repr(b) for b in self._bounds]
        # Per HDR layout: each slot's highest and median equivalent value (µs), and per bound how many slots from
        # index 0 have a highest value ≤ it (what counts in `le`). All loadgen latency histograms share one layout.
        self._layouts: dict[tuple[int, ...], _Layout] = {}
        # id(group) → (group, its version, its rendered lines per family).
        self._cache: dict[int, tuple[GroupStats, tuple[int, ...], dict[str, str]]] = {}
        # id(histogram) → (it, its counts array, a numpy view of that array): read in place until the window grows.
        self._views: dict[int, tuple[LatencyHistogram, Any, np.ndarray]] = {}
        self._health_cache: dict[int, tuple[HealthStats, tuple[int, int, int], dict[str, Any]]] = {}
        self._line_templates: dict[str, dict[str, tuple[str, str]]] = {}

    def _layout(self, hist: LatencyHistogram) -> _Layout:
        layout = hist.layout
        got = self._layouts.get(layout.key)
        if got is None:
            value_at, median_of, highest_of = layout.value_at, layout.median_of, layout.highest_of
            n = layout.counts_len
            values = [value_at(i) for i in range(n)]
            highest = np.array([highest_of(v) for v in values], dtype=np.float64)
            median = np.array([median_of(v) for v in values], dtype=np.int64)
            ends = np.searchsorted(highest, np.array(self._bounds) * 1e6, side="right")
            got = self._layouts[layout.key] = _Layout(highest, median, ends, layout.index, n - 1, Scratch(n))
        return got

    def figures(self, hist: LatencyHistogram, censored: int = 0) -> HistFigures:
        """Cumulative bucket counts, sum (s) and exact quantiles (s) of one histogram, by the report's rank rule
        (`LatencyHistogram.summary_ms`: censored samples rank above every recorded one)."""
        bounds = hist.recorded_slots()
        off, counts = hist.counts_window()
        if bounds is None or counts is None:
            return HistFigures([0] * (len(self._bounds) + 1), 0.0, [math.inf] * len(_QUANTILES) if censored else [])
        n, lo, hi = bounds
        lay = self._layout(hist)
        view = self._views.get(id(hist))
        if view is None or view[0] is not hist or view[1] is not counts:
            # The histogram adds into its counts array in place: one numpy view of it serves every later scrape,
            # until its window grows (a new array).
            view = self._views[id(hist)] = (hist, counts, np.frombuffer(memoryview(counts).cast("B"), dtype=np.int64))
        ranks = [max(int(q * (n + censored) + 0.5), 1) for q, _ in _QUANTILES]
        # The walk runs over the window: slot `off + s` is its `s`, and the tables are shifted to match.
        ends = lay.ends - off if off else lay.ends
        median = lay.median[off:] if off else lay.median
        buckets, recorded, total_us, slots = walk(view[2], lo - off, hi - off, ends, median, ranks, lay.scratch)
        buckets.append(recorded)
        highest = lay.highest
        # A rank past the last recorded slot is among the censored samples.
        qs = [float(highest[s + off]) / 1e6 if s >= 0 else math.inf for s in slots]
        total = total_us / 1e6
        return HistFigures(buckets, total, qs)

    def _group_lines(self, variant: str, mix: str, g: GroupStats) -> dict[str, str]:
        lab = f'variant="{_esc(variant)}",mix="{_esc(mix)}"'
        out: dict[str, list[str]] = {name: [] for name in _GROUP_FAMILIES}
        out["loadgen_requests"] += [
            f'loadgen_requests_total{{{lab},outcome="ok"}} {g.ok}\n',
            f'loadgen_requests_total{{{lab},outcome="error"}} {g.requests - g.ok}\n',
        ]
        out["loadgen_requests_excluded"] += [
            f'loadgen_requests_excluded_total{{{lab},reason="warmup"}} {g.warmup_excluded}\n',
            f'loadgen_requests_excluded_total{{{lab},reason="cut_by_stop"}} {g.cut_by_stop}\n',
            f'loadgen_requests_excluded_total{{{lab},reason="cancelled"}} {g.cancelled}\n',
        ]
        out["loadgen_requests_by_fate"] += [
            f'loadgen_requests_by_fate_total{{{lab},fate="{f}"}} {n}\n' for f, n in sorted(g.fates.items())
        ]
        out["loadgen_errors"] += [
            f'loadgen_errors_total{{{lab},class="{_esc(c)}"}} {n}\n' for c, n in sorted(g.errors.items())
        ]
        out["loadgen_output_tokens"].append(f"loadgen_output_tokens_total{{{lab}}} {g.output_tokens}\n")
        out["loadgen_prompt_tokens"].append(f"loadgen_prompt_tokens_total{{{lab}}} {g.prompt_tokens}\n")
        out["loadgen_goodput_requests"].append(f"loadgen_goodput_requests_total{{{lab}}} {g.goodput_ok}\n")
        out["loadgen_censored_samples"] += [
            f'loadgen_censored_samples_total{{{lab},metric="{m}"}} {n}\n' for m, n in sorted(g.censored.items())
        ]
        templates = self._templates(lab)
        for m, _ in _HISTOGRAMS:
            hist = g.hists.get(m)
            if hist is None:
                continue
            f = self.figures(hist, g.censored.get(m, 0))
            hist_lines, quantile_lines = templates[m]
            out[f"loadgen_{m}_seconds"].append(hist_lines.format(*f.buckets, f.buckets[-1], repr(f.sum_s)))
            if f.quantiles:  # all of them, or none for a histogram with no sample and none censored
                values = [repr(v) if v != math.inf else "+Inf" for v in f.quantiles]
                out[f"loadgen_{m}_quantile_seconds"].append(quantile_lines.format(*values))
        return {k: "".join(v) for k, v in out.items()}

    def _templates(self, lab: str) -> dict[str, tuple[str, str]]:
        """Per histogram of one group, its bucket / count / sum lines and its quantile lines as one format string
        each, built once per group: a cold scrape fills ~5,000 such lines, one `str.format` per histogram."""
        got = self._line_templates.get(lab)
        if got is None:

            def line(head: str) -> str:
                return head.replace("{", "{{").replace("}", "}}") + " {}\n"

            got = self._line_templates[lab] = {
                m: (
                    "".join(
                        [line(f'loadgen_{m}_seconds_bucket{{{lab},le="{le}"}}') for le in [*self._le, "+Inf"]]
                        + [line(f"loadgen_{m}_seconds_count{{{lab}}}"), line(f"loadgen_{m}_seconds_sum{{{lab}}}")]
                    ),
                    "".join(line(f'loadgen_{m}_quantile_seconds{{{lab},quantile="{qs}"}}') for _, qs in _QUANTILES),
                )
                for m, _ in _HISTOGRAMS
            }
        return got

    def render(self) -> bytes:
        view = self._source()
        parts: dict[str, list[str]] = {name: [] for name, _, _ in FAMILIES}
        if view is not None:
            cache, self._cache = self._cache, {}
            if len(self._views) > 8 * len(view.aggregate.groups) + 64:
                self._views, self._health_cache, self._line_templates = {}, {}, {}  # histograms of earlier runs
            for (variant, mix), g in sorted(view.aggregate.groups.items()):
                # Every field a line shows only grows within a run, so these counts change whenever a line would.
                version = (
                    g.requests,
                    g.warmup_excluded,
                    g.cut_by_stop,
                    g.cancelled,
                    *g.fates.values(),
                    g.output_tokens,
                    g.prompt_tokens,
                    *(h.count for h in g.hists.values()),
                    *g.censored.values(),
                )
                hit = cache.get(id(g))
                lines = hit[2] if hit is not None and hit[0] is g and hit[1] == version else None
                if lines is None:
                    lines = self._group_lines(variant, mix, g)
                self._cache[id(g)] = (g, version, lines)
                for name, text in lines.items():
                    parts[name].append(text)
            self._classes(view, parts)
            self._sessions(view, parts)
            self._server_split(view, parts)
            self._health(view, parts)
        out = []
        for name, kind, doc in FAMILIES:
            # The text format names a counter by its samples' name, `_total` included.
            shown = f"{name}_total" if kind == "counter" else name
            out.append(f"# HELP {shown} {doc}\n# TYPE {shown} {kind}\n")
            out.extend(parts[name])
        return "".join(out).encode()

    def _classes(self, view: LiveView, parts: dict[str, list[str]]) -> None:
        for (variant, cls), g in sorted(view.aggregate.classes.items()):
            lab = f'variant="{_esc(variant)}",priority_class="{_esc(cls)}"'
            parts["loadgen_class_requests"] += [
                f'loadgen_class_requests_total{{{lab},outcome="ok"}} {g.ok}\n',
                f'loadgen_class_requests_total{{{lab},outcome="error"}} {g.requests - g.ok}\n',
            ]
            for m, _ in _HISTOGRAMS:
                hist = g.hists.get(m)
                if hist is not None:
                    f = self.figures(hist, g.censored.get(m, 0))
                    parts["loadgen_class_latency_quantile_seconds"] += [
                        f'loadgen_class_latency_quantile_seconds{{{lab},metric="{m}",quantile="{qs}"}} {_num(v)}\n'
                        for (_, qs), v in zip(_QUANTILES, f.quantiles, strict=False)
                    ]

    def _sessions(self, view: LiveView, parts: dict[str, list[str]]) -> None:
        """Agent sessions per (variant, mix), by the report's own figures (report/sessions.py): one histogram
        summary per agent mix and scrape, few next to the groups' walks."""
        for (variant, mix), n in sorted(view.sessions_in_flight.items()):
            lab = f'variant="{_esc(variant)}",mix="{_esc(mix)}"'
            parts["loadgen_sessions_in_flight"].append(f"loadgen_sessions_in_flight{{{lab}}} {n}\n")
        for (variant, mix), s in sorted(view.aggregate.sessions.items()):
            fig = session_figures(s, view.window_s)
            lab = f'variant="{_esc(variant)}",mix="{_esc(mix)}"'
            parts["loadgen_sessions"] += [
                f'loadgen_sessions_total{{{lab},fate="{f.value}"}} {fig["fates"].get(f.value, 0)}\n'
                for f in SessionFate
            ]
            d = fig["duration_ms"]
            if d.get("count") or d.get("censored"):
                parts["loadgen_session_duration_quantile_seconds"] += [
                    f'loadgen_session_duration_quantile_seconds{{{lab},quantile="{qs}"}} '
                    f"{_num(math.inf if d[name] is None else d[name] / 1e3)}\n"
                    for (name, _), (_, qs) in zip(PERCENTILES, _QUANTILES, strict=True)
                ]
            if fig["sessions_per_hour"] is not None:
                parts["loadgen_sessions_per_hour"].append(
                    f"loadgen_sessions_per_hour{{{lab}}} {_num(fig['sessions_per_hour'])}\n"
                )
            parts["loadgen_session_time_share_ratio"] += [
                f'loadgen_session_time_share_ratio{{{lab},part="{part}"}} {_num(v)}\n'
                for part, v in fig["time_share"].items()
                if v is not None
            ]
            if fig["goodput_share"] is not None:
                parts["loadgen_session_goodput_ratio"].append(
                    f"loadgen_session_goodput_ratio{{{lab}}} {_num(fig['goodput_share'])}\n"
                )

    def _server_split(self, view: LiveView, parts: dict[str, list[str]]) -> None:
        for variant, times in sorted(view.server_times.items()):
            hists = [h for (v, _), g in view.aggregate.groups.items() if v == variant and (h := g.hists.get("ttft"))]
            n = sum(h.count for h in hists)
            client = sum(h.mean() * h.count for h in hists) / n * 1e3 if n else None
            split = split_ttft(client, times)
            if split is None:
                continue
            lab = f'variant="{_esc(variant)}"'
            for part, key in _SPLIT_PARTS:
                if split[key] is not None:
                    parts["loadgen_server_ttft_split_seconds"].append(
                        f'loadgen_server_ttft_split_seconds{{{lab},part="{part}"}} {_num(split[key] / 1e3)}\n'
                    )
            if split["queue_share"] is not None:
                parts["loadgen_server_queue_share_ratio"].append(
                    f"loadgen_server_queue_share_ratio{{{lab}}} {_num(split['queue_share'])}\n"
                )

    def _health_summary(self, h: HealthStats) -> dict[str, Any]:
        """`h.summary()`, recomputed only when it recorded something since (a summary walks its histograms)."""
        version = (h.loop_lag.count, h.schedule_slip.count, len(h.cpu_samples))
        hit = self._health_cache.get(id(h))
        if hit is None or hit[0] is not h or hit[1] != version:
            hit = self._health_cache[id(h)] = (h, version, h.summary())
        return hit[2]

    def _health(self, view: LiveView, parts: dict[str, list[str]]) -> None:
        summaries = {w: self._health_summary(h) for w, h in sorted(view.health.items())}
        for w, s in summaries.items():
            lab = f'worker="{_esc(w)}"'
            for family, value in (
                ("loadgen_worker_loop_lag_p99_seconds", _scaled(s.get("loop_lag_ms", {}).get("p99"), 1e3)),
                ("loadgen_worker_schedule_slip_p99_seconds", _scaled(s.get("schedule_slip_ms", {}).get("p99"), 1e3)),
                ("loadgen_worker_cpu_p90_ratio", _scaled(s.get("cpu_percent", {}).get("p90"), 100.0)),
            ):
                if value is not None:
                    parts[family].append(f"{family}{{{lab}}} {_num(value)}\n")
        if view.thresholds is not None:
            reasons = verdict(summaries, view.thresholds)
            parts["loadgen_run_untrustworthy_reasons"].append(f"loadgen_run_untrustworthy_reasons {len(reasons)}\n")
        started = f',started="{_esc(view.started)}"' if view.started else ""
        parts["loadgen_run_info"].append(
            f'loadgen_run_info{{scenario="{_esc(view.scenario)}",run="{view.run}"{started}}} 1\n'
        )


def _scaled(v: Any, by: float) -> float | None:
    return None if v is None else float(v) / by


class _TextCollector(Collector):
    def __init__(self, text: MetricsText) -> None:
        self._text = text

    def collect(self) -> Iterator[Metric]:
        yield from text_string_to_metric_families(self._text.render().decode())


def exporter_registry(text: MetricsText) -> CollectorRegistry:
    """A registry of its own (never prometheus_client's global one) holding only loadgen's families, read at
    collection time: what `push_to_gateway` takes."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_TextCollector(text))
    return registry


def push_final(url: str, text: MetricsText, scenario: str, timeout: float = 10.0) -> None:
    """The final figures of a headless run to a Pushgateway, grouped by job `loadgen` and the scenario only: the push
    (a PUT) replaces the previous run's group of the same scenario, so a nightly run leaves one group, not one per
    night. Which run it holds is `loadgen_run_info`'s `started` label."""
    push_to_gateway(
        url, job="loadgen", registry=exporter_registry(text), grouping_key={"scenario": scenario}, timeout=timeout
    )
