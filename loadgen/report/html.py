"""The HTML report: one self-contained file, rendered from the canonical report JSON (and, for a sweep, its
sweep.json), that opens offline years later.

Everything is inside the file: the data (one JSON block), the page's few lines of script and style, and the charting
library, Chart.js 4 (MIT; loadgen/report/assets/, refetched by scripts/update-chart-assets.sh). Chosen by size and
interactivity: ~205 KB minified, where plotly.js (vLLM's bench, AIPerf) is ~4.6 MB per report — a nightly pipeline
keeps hundreds — while uPlot (~50 KB) plots only series that share one x array and has no bars, so per-variant CDFs
(each its own x), floating confidence intervals and stacked error bars would be hand-drawn. Chart.js has all of
them, plus tooltips, legends that hide a series on click, and log axes. No CDN and no request at view time: a hosted
template is how GuideLLM's old reports went blank offline (guidellm #303); a Content-Security-Policy of
`default-src 'none'` makes the browser refuse any fetch the page might attempt.

Summary first (verdict per variant, SLOs measured vs threshold, run trust and the worker that broke it), then the
charts (`html_charts`), then the percentile tables.
"""

from __future__ import annotations

import html
from functools import cache
from importlib.resources import files
from typing import Any

import orjson

from loadgen.exit_codes import ExitCode
from loadgen.report.adapters import adapter_html
from loadgen.report.cost_html import render_cost_html
from loadgen.report.decision import decision_html
from loadgen.report.html_charts import Chart, report_charts, sweep_charts
from loadgen.report.latency_render import latency_html
from loadgen.report.lost_workers import worker_notes
from loadgen.report.numbers import (
    AS_SET,
    CPU_PERCENT,
    LOOP_LAG_MS,
    REQ_PER_S,
    TOK_PER_S,
    counted,
    figure,
    in_percent,
    ms,
    percent,
    stat_ms,
)
from loadgen.report.quality_render import quality_html
from loadgen.report.reasoning import reasoning_html
from loadgen.report.request_timeline import timeline_html
from loadgen.report.sessions_html import sessions_html, timeline_charts
from loadgen.report.stopped_early import stopped_early_text
from loadgen.report.tool_calls import tool_calls_html
from loadgen.report.whole_replies import NOT_MEASURED, whole_reply_html

__all__ = ["chart_library", "page", "render_html", "render_sweep_html"]

_CSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:"
_METRICS = (("ttft", "TTFT"), ("itl", "ITL"), ("tpot", "TPOT"), ("e2e", "E2E"), ("queue_delay", "Queue delay"))


@cache
def _asset(name: str) -> str:
    return files("loadgen.report").joinpath("assets", name).read_text(encoding="utf-8")


def chart_library() -> tuple[str, str]:
    """(name and version, minified script) of the inlined charting library."""
    return f"Chart.js {_asset('chart.js.version').strip()}", _asset("chart.umd.min.js")


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _json_script(data: Any) -> str:
    # In a <script> element: no "</script>" or "<!--" may appear, whatever a variant is called. \u escapes are JSON.
    text = orjson.dumps(data).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _figure(c: Chart) -> str:
    note = f"<p>{_e(c['note'])}</p>" if c.get("note") else ""
    return (
        f'<figure class="chart"><figcaption>{_e(c["title"])}{note}</figcaption>'
        f'<div class="box"><canvas id="{_e(c["id"])}" role="img" aria-label="{_e(c["title"])}"></canvas></div></figure>'
    )


def page(
    title: str,
    body: str,
    charts: list[Chart],
    after: str = "",
    refresh_s: int | None = None,
    placed: list[Chart] | None = None,
) -> str:
    """A whole document: `body` (HTML, escaped already), a grid of `charts`, `after`; then the charts' data, the
    library and the script that draws them. `refresh_s`: the browser reloads the page that often (a live view).
    `placed`: charts whose canvas `body` holds already (drawn, not put in the grid)."""
    lib_name, lib = chart_library()
    drawn = [*charts, *(placed or ())]
    grid = f'<div class="charts">{"".join(_figure(c) for c in charts)}</div>' if charts else ""
    refresh = f'<meta http-equiv="refresh" content="{int(refresh_s)}">' if refresh_s else ""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">{refresh}'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_asset('report.css')}</style></head>\n<body>\n"
        f"{body}\n{grid}\n{after}\n"
        f"<footer>Rendered by loadgen; charts drawn by {_e(lib_name)} (MIT licence), inlined: this file needs "
        "no network.</footer>\n"
        f'<script type="application/json" id="loadgen-data">{_json_script({"charts": drawn})}</script>\n'
        f"<script>\n{lib}</script>\n"
        f"<script>{_asset('report.js')}</script>\n"
        "</body></html>\n"
    )


def _fmt(v: Any, nd: int = 1) -> str:
    return figure(v, nd) if v is None or isinstance(v, int | float) else _e(v)  # report/numbers.py's rule


def _stat(group: dict[str, Any], metric: str, stat: str) -> str:
    return stat_ms(group.get("metrics_ms", {}).get(metric), stat)


def _variant_verdicts(report: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """variant -> (css class, words): untrustworthy for all when the run is; else pass / n SLOs breached."""
    trusted = report["run"].get("trustworthy", True)
    out = {}
    for v in report["variants"]:
        mine = [s for s in report.get("slos", []) if s.get("variant") == v["name"]]
        failed = [s for s in mine if not s.get("passed")]
        if not trusted:
            out[v["name"]] = ("untrustworthy", "not trustworthy (see run trust)")
        elif failed:
            out[v["name"]] = ("fail", f"FAIL: {len(failed)} of {counted(len(mine), 'SLO')} breached")
        else:
            out[v["name"]] = ("pass", f"pass ({counted(len(mine), 'SLO')} met)" if mine else "pass (no SLO)")
    return out


def _summary(report: dict[str, Any]) -> str:
    verdicts = _variant_verdicts(report)
    head = (
        "<tr><th class=text>variant</th><th class=text>verdict</th><th>requests</th><th>success</th><th>req/s</th>"
        "<th>output tok/s</th><th>TTFT p50</th><th>TTFT p99</th><th>ITL p50</th><th>TPOT p50</th><th>E2E p99</th>"
        "<th>TTFT p99 speedup</th></tr>"
    )
    # The comparison's speedups (speedup_vs_baseline holds the same numbers); censored: among failed requests.
    censored = {(e["variant"], e["metric"], e["stat"]) for e in report.get("comparison") or [] if e.get("censored")}
    rows = []
    for v in report["variants"]:
        g = v["overall"]
        cls, words = verdicts[v["name"]]
        speed = (v.get("speedup_vs_baseline") or {}).get("ttft_p99")
        speed_cell = "–" if speed is None else f"{speed:.2f}×"
        if (v["name"], "ttft", "p99") in censored:
            speed_cell = "censored"
        name = _e(v["name"]) + (" <small>(baseline)</small>" if v.get("baseline") else "")
        cell = _stat if v.get("streamed") is not False else lambda _g, _m, _s: NOT_MEASURED  # whole replies
        rows.append(
            f'<tr class="{"fail" if cls != "pass" else ""}"><td class=text>{name}</td>'
            f'<td class="text verdict {cls}">{_e(words)}</td><td>{_fmt(g.get("requests"))}</td>'
            f"<td>{percent(g.get('success_rate'))}</td><td>{_fmt(g.get('requests_per_s'), REQ_PER_S)}</td>"
            f"<td>{_fmt(g.get('output_tokens_per_s'), TOK_PER_S)}</td><td>{cell(g, 'ttft', 'p50')}</td>"
            f"<td>{cell(g, 'ttft', 'p99')}</td><td>{cell(g, 'itl', 'p50')}</td><td>{cell(g, 'tpot', 'p50')}</td>"
            f"<td>{_stat(g, 'e2e', 'p99')}</td><td>{speed_cell}</td></tr>"
        )
    return (
        f"<h2>Summary per variant</h2><table>{head}{''.join(rows)}</table><p class=note>Latencies in ms.</p>"
        + _fates(report)
        + whole_reply_html(report)
    )


def _fates(report: dict[str, Any]) -> str:
    """Every request by how it ended (docs/reference/fates.md), a line per variant."""
    lines = [
        f"<li>{_e(v['name'])}: " + " · ".join(f"{_e(f)} {_fmt(n)}" for f, n in v["overall"]["fates"].items()) + "</li>"
        for v in report["variants"]
        if v["overall"].get("fates")
    ]
    if not lines:
        return ""
    return (
        "<p class=note>Every request by how it ended (a request belongs to the window it was sent in; cut, "
        "cancelled and failed ones are censored samples, above every measured one):</p><ul class=note>"
        + "".join(lines)
        + "</ul>"
    )


def _slo_table(report: dict[str, Any]) -> str:
    slos = report.get("slos") or []
    if not slos:
        return "<h2>SLOs</h2><p>No SLO was set.</p>"
    rows = []
    for s in slos:
        scope = s.get("mix") or (f"class {s['class']}" if s.get("class") else "all")
        scope = f"adapter {s['adapter']}" if s.get("adapter") else scope
        if s.get("min_percent") is not None:  # a share: success rate, open-loop arrivals sent
            threshold = f"≥ {in_percent(s['min_percent'], AS_SET)}"
            measured = in_percent(s.get("observed_percent"), missing="no data")
            if not s.get("passed") and s.get("errors"):
                measured += " (" + ", ".join(f"{_e(k)} {n}" for k, n in s["errors"].items()) + ")"
            if s.get("note"):
                measured += f"<br><small>{_e(s['note'])}</small>"
        else:
            threshold = f"{_e(s.get('stat'))} ≤ {s['max_ms']:,g} ms" if s.get("max_ms") is not None else "–"
            obs = s.get("observed_ms")
            measured = (
                "censored (failed requests)" if s.get("censored") else "no data" if obs is None else f"{ms(obs)} ms"
            )
        ok = s.get("passed")
        rows.append(
            f'<tr class="{"" if ok else "fail"}"><td class=text>{_e(s.get("variant"))}</td>'
            f"<td class=text>{_e(scope)}</td>"
            f"<td class=text>{_e(s.get('slo', s.get('metric')))}</td><td>{measured}</td><td>{threshold}</td>"
            f'<td class="text result {"pass" if ok else "fail"}">{"pass" if ok else "BREACHED"}</td></tr>'
        )
    head = (
        "<tr><th class=text>variant</th><th class=text>scope</th><th class=text>SLO</th><th>measured</th>"
        "<th>threshold</th><th class=text>result</th></tr>"
    )
    return f"<h2>SLOs</h2><table>{head}{''.join(rows)}</table>"


def _label(code: Any) -> str:
    """The exit code's few words (loadgen/exit_codes.py); "?" for what no code means."""
    known = isinstance(code, int) and not isinstance(code, bool) and code in {int(c) for c in ExitCode}
    return ExitCode(code).label if known else "?"


def _failed(run: dict[str, Any]) -> str:
    """Why the run failed (something crashed, or it was cut short): its figures below are what it measured."""
    reasons = run.get("failed") or []
    stopped = stopped_early_text(run)  # stop_when: ended the run (no failure: a verdict)
    if not reasons:
        return f"<p class=stopped-early>{_e(stopped)}</p>" if stopped else ""
    items = "".join(f"<li>{_e(r)}</li>" for r in reasons)
    return f"<ul>{items}</ul>The figures below are what it measured until then, and no verdict."


def _trust(report: dict[str, Any]) -> str:
    run = report["run"]
    reasons = run.get("untrustworthy_reasons") or []
    parts = ["<h2>Run trust</h2>"]
    if run.get("trustworthy", not reasons):
        parts.append('<div class="banner ok">The load generator kept up: its own health stayed within limits.</div>')
    else:
        items = "".join(f"<li>{_e(r)}</li>" for r in reasons)
        parts.append(
            '<div class="banner bad"><b>Not trustworthy</b> — the load generator may have been the bottleneck, so '
            f"its latencies may be inflated:<ul>{items}</ul></div>"
        )
    notes = [_e(text) for text in worker_notes(run)]
    notes += [_e(n) for n in run.get("recovered") or []]
    if notes:
        parts.append('<div class="banner warn"><ul>' + "".join(f"<li>{n}</li>" for n in notes) + "</ul></div>")
    workers = run.get("workers") or {}
    if workers:
        rows = []
        for wid, h in sorted(workers.items()):
            lag, cpu, rd = h.get("loop_lag_ms", {}), h.get("cpu_percent", {}), h.get("read_delay", {})
            named = any(f"worker {wid}:" in r or f"{wid}:" in r for r in reasons)
            lag_cells = "".join(f"<td>{_fmt(lag.get(k), LOOP_LAG_MS)}</td>" for k in ("p50", "p99", "max"))
            cpu_cells = "".join(f"<td>{_fmt(cpu.get(k), CPU_PERCENT)}</td>" for k in ("mean", "p90"))
            rows.append(
                f'<tr class="{"fail" if named else ""}"><td class=text>{_e(wid)}</td>{lag_cells}{cpu_cells}'
                f"<td>{percent(rd.get('late_share'))}</td></tr>"
            )
        parts.append(
            "<table><tr><th class=text>worker</th><th>loop lag p50 ms</th><th>p99 ms</th><th>max ms</th>"
            f"<th>CPU mean %</th><th>CPU p90 %</th><th>reads &gt; 1 ms late</th></tr>{''.join(rows)}</table>"
            "<p class=note>Loop lag: how late the worker's event loop woke from a 10 ms sleep (requests go out that "
            "late). A worker named above is highlighted.</p>"
        )
    return "".join(parts)


def _comparison_words(r: dict[str, Any]) -> str:
    sp = r.get("speedup")
    if r.get("censored"):
        return "not compared: the percentile falls among failed requests (censored)"
    if not isinstance(sp, int | float):
        return "not compared (too few requests)"
    if r.get("ci_low") is None and r.get("ci_high") is None and not _censored_bound(r):
        return "no interval"
    open_side = " (a bound falls among failed requests: censored, open on that side)" if _censored_bound(r) else ""
    if r.get("within_noise"):
        return "within noise: the interval contains 1.0, no difference shown" + open_side
    if r.get("within_noise") is None:
        return f"no verdict: only {counted(r.get('tail_n', 0), 'request')} above the percentile" + open_side
    way = "faster than the baseline" if sp > 1 else "slower than the baseline" if sp < 1 else "the same"
    return way + open_side


def _censored_bound(r: dict[str, Any]) -> bool:
    return bool(r.get("ci_low_censored") or r.get("ci_high_censored"))


def _interval(r: dict[str, Any]) -> str:
    """The interval as 1.580 – 1.660; a bound among failed requests is "censored"."""
    lo, hi = r.get("ci_low"), r.get("ci_high")
    if (lo is None or hi is None) and not _censored_bound(r):
        return "–"
    low = "censored" if r.get("ci_low_censored") else _fmt(lo, 3)
    high = "censored" if r.get("ci_high_censored") else _fmt(hi, 3)
    return f"{low} – {high}"


def _comparison_table(report: dict[str, Any]) -> str:
    rows = report.get("comparison") or []
    if not rows:
        return ""
    out = []
    for r in rows:
        interval = _interval(r)
        paired = {True: "paired", False: "unpaired"}.get(r.get("paired"), "–")
        out.append(
            f"<tr><td class=text>{_e(r.get('variant'))}</td>"
            f"<td class=text>{_e(r.get('metric'))} {_e(r.get('stat', ''))}</td>"
            f"<td>{_fmt(r.get('speedup'), 3)}</td><td>{interval}</td><td class=text>{paired}</td>"
            f"<td class=text>{_e(_comparison_words(r))}</td></tr>"
        )
    head = (
        "<tr><th class=text>variant</th><th class=text>metric</th><th>speedup</th><th>interval</th>"
        "<th class=text>pairing</th><th class=text>reading</th></tr>"
    )
    method = report.get("comparison_method") or {}
    note = ""
    if isinstance(method.get("resamples"), int) and isinstance(method.get("confidence"), int | float):
        note = (
            f"<p class=note>Speedup = baseline ÷ variant (&gt; 1 is faster); {percent(method['confidence'], AS_SET)} "
            f"{_e(method.get('interval', ''))} intervals from {method['resamples']:,} bootstrap resamples"
            + (f", seeded by {_e(method['seed_rule'])}" if method.get("seed_rule") else "")
            + ".</p>"
        )
    return f"<h2>Comparison with the baseline</h2><table>{head}{''.join(out)}</table>{note}"


def _percentiles(report: dict[str, Any]) -> str:
    parts = ["<h2>Percentiles (ms)</h2>"]
    for metric, title in _METRICS:
        rows = []
        for v in report["variants"]:
            for mix, g in [("all", v["overall"]), *v["mixes"].items()]:
                s = g.get("metrics_ms", {}).get(metric)
                if s and (s.get("count") or s.get("censored")):
                    cells = "".join(f"<td>{_stat(g, metric, k)}</td>" for k in ("p50", "p90", "p99", "p99.9", "max"))
                    rows.append(
                        f"<tr><td class=text>{_e(v['name'])}</td><td class=text>{_e(mix)}</td>"
                        f"<td>{_fmt(s.get('count'))}</td><td>{_fmt(s.get('censored', 0))}</td>{cells}</tr>"
                    )
        if rows:
            parts.append(
                f"<h3>{title}</h3><table><tr><th class=text>variant</th><th class=text>mix</th><th>samples</th>"
                "<th>censored</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>"
                f"{''.join(rows)}</table>"
            )
    return "".join(parts)


def render_html(report: dict[str, Any], sweep: dict[str, Any] | None = None, refresh_s: int | None = None) -> str:
    """The whole page of `report` (the canonical JSON), with `sweep`'s latency–throughput curves when given.
    `refresh_s`: a live report (the web UI's, while the run goes on), reloaded by the browser that often."""
    run = report["run"]
    code = report.get("exit_code")
    trusted = run.get("trustworthy", True)
    banner = "ok" if code == 0 else "bad"
    live = (
        f'<div class="banner warn"><b>Live</b>: the run is still going; these are its figures so far, and the '
        f"verdict is what it would be if it stopped now. This page reloads every {int(refresh_s)} s.</div>"
        if refresh_s
        else ""
    )
    header = live + (
        f"<h1>loadgen report — {_e(report['scenario'])}</h1>"
        f"<p class=meta>Generated {_e(report.get('generated_at', '?'))} · measured window "
        f"{_fmt(run.get('window_s'))} s "
        f"(warm-up excluded) · seed {_e(report.get('seed'))} · baseline {_e(report.get('baseline'))} · percentiles "
        f"from HDR histograms, ±{percent(report['histogram']['relative_error'], AS_SET)}</p>"
        f'<div class="banner {banner}"><span class=verdict>Exit code {_e(code)}: {_e(_label(code))}</span>'
        f"{'' if trusted else ' — the load generator is not trustworthy (below).'}"
        f"{''.join(f' — the target: {_e(r)}.' for r in run.get('target_breaches') or [])}{_failed(run)}</div>"
    )
    charts = report_charts(report) + (sweep_charts(sweep) if sweep else [])
    session_charts = timeline_charts(report)
    body = "".join(
        [
            header,
            _summary(report),
            decision_html(report),
            _slo_table(report),
            _trust(report),
            _comparison_table(report),
            sessions_html(report, session_charts),
            quality_html(report),
            latency_html(report),
            reasoning_html(report),
            tool_calls_html(report),
            adapter_html(report),
            render_cost_html(report),
            "<h2>Charts</h2>",
        ]
    )
    if not charts:
        body += "<p>The report holds no data to chart.</p>"
    title = f"loadgen report — {report['scenario']}"
    after = _percentiles(report) + timeline_html(report)
    return page(title, body, charts, after=after, refresh_s=refresh_s, placed=session_charts)


def render_sweep_html(sweep: dict[str, Any]) -> str:
    """A sweep's own page (sweep.html): each variant's knee and its latency–throughput curves."""
    by_concurrency = sweep.get("plan", {}).get("by") == "concurrency"
    key, unit = ("knee_concurrency", "users") if by_concurrency else ("knee_rate_per_s", "req/s")
    rows = "".join(
        f"<tr><td>{_e(v['name'])}</td><td>{_e('none passed' if v.get(key) is None else f'{v[key]:g} {unit}')}</td>"
        f"<td>{len(v.get('steps', []))}</td><td>{_fmt(v.get('usd_per_1m_output_tokens_at_knee'), 4)}</td></tr>"
        for v in sweep.get("variants", [])
    )
    body = (
        f"<h1>loadgen sweep — {_e(sweep.get('scenario', '?'))}</h1>"
        f"<p class=meta>Generated {_e(sweep.get('generated_at', '?'))} · by "
        f"{_e('concurrency' if by_concurrency else 'rate')}"
        f" · {_e(sweep.get('step_duration_s'))} s steps · exit code {_e(sweep.get('exit_code'))}</p>"
        f"<table><tr><th>variant</th><th>knee</th><th>steps</th><th>$ / 1M output tok at the knee</th></tr>{rows}"
        "</table><h2>Charts</h2>"
    )
    return page(f"loadgen sweep — {sweep.get('scenario', '?')}", body, sweep_charts(sweep))
