"""The HTML report: self-contained, every chart's data taken from the report, names escaped, verdicts shown."""

from __future__ import annotations

import json
import re
from array import array
from pathlib import Path
from typing import Any

from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report.build import build_report, write_reports
from loadgen.report.html import chart_library, render_html

SCENARIO = """
name: html-test
variants:
  - {name: base, base_url: "http://127.0.0.1:1", model: m, baseline: true}
  - {name: fast, base_url: "http://127.0.0.1:2", model: m}
slos:
  - {metric: ttft, stat: p99, max_ms: 10000}
  - {metric: e2e, stat: p50, max_ms: 1}
"""


def _rec(i: int, variant: str, bucket: str, prompt: int, ttft: float, error: str | None = None) -> RequestRecord:
    sent = 1000.0 + i * 0.1
    n = 0 if error else 20
    times = array("d", [sent + ttft + 0.01 * k for k in range(n)])
    rec = RequestRecord(f"{variant}-{i}", variant, "chat", bucket=bucket, sent=sent, chunk_times=times, error=error)
    rec.chunk_tokens = array("l", [1] * n)
    rec.done = times[-1] if n else sent + 0.5
    if not error:
        rec.output_tokens, rec.prompt_tokens, rec.finish_reason = n, prompt, "length"
    return rec


def _report() -> dict[str, Any]:
    agg = Aggregate()
    for i in range(200):
        for variant, speed in (("base", 1.0), ("fast", 0.5)):
            bucket, prompt = ("short", 100) if i % 2 else ("long", 2000)
            error = ErrorKind.HTTP_5XX if variant == "base" and i % 25 == 0 else None
            rec = _rec(i, variant, bucket, prompt, speed * (0.02 + prompt / 20_000), error)
            assert rec.done is not None
            agg.add(rec, 1_700_000_000.0 + rec.done - 1000.0)
    return build_report(parse_scenario(SCENARIO), agg, 20.0)


def _data(page: str) -> dict[str, Any]:
    block = re.search(r'<script type="application/json" id="loadgen-data">(.*?)</script>', page, re.S)
    assert block is not None
    return json.loads(block.group(1))


def _without_library(page: str) -> str:
    _, lib = chart_library()
    assert page.count(lib) == 1  # inlined, whole, once
    return page.replace(lib, "")


def test_the_page_is_self_contained() -> None:
    page = render_html(_report())
    assert "<script src" not in page.lower() and "<link" not in page.lower() and "@import" not in page
    rest = _without_library(page)
    assert not re.search(r"https?://", rest), re.findall(r".{40}https?://.{40}", rest)
    assert "default-src 'none'" in rest  # the browser refuses any fetch the page might attempt
    # Scripts other than the library and the data are ours: none loads anything.
    assert not re.search(r"\b(fetch|XMLHttpRequest|import\()", rest)


def test_every_chart_holds_the_report_s_data() -> None:
    report = _report()
    report.pop("comparison", None)  # drawn when present (next test), left out when absent
    page = render_html(report)
    charts = {c["id"]: c for c in _data(page)["charts"]}
    for c in charts.values():
        assert f'<canvas id="{c["id"]}"' in page
        datasets = c["config"]["data"]["datasets"]
        assert datasets and all(ds["data"] for ds in datasets), c["id"]
    base, fast = report["variants"]
    for metric in ("ttft", "itl", "tpot", "e2e"):
        cdf = charts[f"cdf-{metric}"]["config"]["data"]["datasets"]
        assert [ds["label"] for ds in cdf] == ["base", "fast"]
        assert cdf[0]["data"] == base["overall"]["cdf_ms"][metric]
        assert cdf[1]["data"] == fast["overall"]["cdf_ms"][metric]
    # base's failed requests rank above everything: its E2E curve ends at its success rate.
    assert charts["cdf-e2e"]["config"]["data"]["datasets"][0]["data"][-1][1] == round(192 / 200, 6)
    prompt = {ds["label"]: ds for ds in charts["ttft-vs-prompt"]["config"]["data"]["datasets"]}
    assert [x for x, _ in prompt["fast TTFT p50"]["data"]] == [100.0, 2000.0]
    assert prompt["fast TTFT p50"]["pointLabels"] == ["chat/short, 100 requests", "chat/long, 100 requests"]
    tokens = charts["time-tokens"]["config"]["data"]["datasets"]
    assert sum(y for _, y in tokens[1]["data"]) == fast["overall"]["output_tokens"]
    errors = charts["time-errors"]["config"]["data"]["datasets"]
    assert [ds["label"] for ds in errors] == ["base · http_5xx"] and sum(errors[0]["data"]) == 8
    for key in ("time-requests", "time-ttft", "time-e2e"):
        assert key in charts
    assert "comparison" not in charts and not any(k.startswith("sweep-") for k in charts)


def test_comparison_and_sweep_are_drawn_when_given() -> None:
    report = _report()
    report["comparison"] = [
        {"variant": "fast", "metric": "ttft", "stat": "p50", "speedup": 1.9, "ci_low": 1.8, "ci_high": 2.0,
         "within_noise": False},
        {"variant": "fast", "metric": "e2e", "stat": "p99", "speedup": 1.01, "ci_low": 0.97, "ci_high": 1.05,
         "within_noise": True},
    ]  # fmt: skip
    step = {"requested_rate_per_s": 2.0, "achieved_rate_per_s": 1.98, "ttft_p50_ms": 40.0, "ttft_p99_ms": "censored"}
    sweep = {"variants": [{"name": "base", "knee_rate_per_s": 2.0, "steps": [step, {**step, "achieved_rate_per_s": 3.9,
             "requested_rate_per_s": 4.0, "ttft_p50_ms": 80.0, "ttft_p99_ms": 300.0}]}]}  # fmt: skip
    page = render_html(report, sweep)
    charts = {c["id"]: c for c in _data(page)["charts"]}
    comp = charts["comparison"]["config"]["data"]
    assert comp["labels"] == ["fast · ttft p50", "fast · e2e p99"]
    assert comp["datasets"][0]["data"] == [1.9, 1.01] and comp["datasets"][1]["data"] == [[1.8, 2.0], [0.97, 1.05]]
    assert "within noise" in page and "faster than the baseline" in page
    # A row without a speedup (a censored percentile) is in the table, in words, and not in the chart.
    report["comparison"].append({"variant": "fast", "metric": "ttft", "stat": "p99", "speedup": None, "censored": True})
    page = render_html(report)
    assert "falls among failed requests (censored)" in page
    assert len(_data(page)["charts"][-1]["config"]["data"]["labels"]) == 2
    ttft = {ds["label"]: ds["data"] for ds in charts["sweep-ttft"]["config"]["data"]["datasets"]}
    assert ttft == {"base p50": [[1.98, 40.0], [3.9, 80.0]], "base p99": [[3.9, 300.0]]}  # censored: not drawn
    assert "Knee (last passing step before the first failing one): base 2 req/s" in charts["sweep-ttft"]["note"]
    # A concurrency sweep: steps are users, drawn against the successful requests/s they achieved.
    users = [{"concurrency": n, "requests_per_s": 10.0 * n, "e2e_p50_ms": 100.0 + n} for n in (1, 2, 4)]
    page = render_html(report, {"variants": [{"name": "base", "knee_concurrency": 2, "steps": users}]})
    e2e = next(c for c in _data(page)["charts"] if c["id"] == "sweep-e2e")
    assert e2e["config"]["data"]["datasets"][0]["data"] == [[10.0, 101.0], [20.0, 102.0], [40.0, 104.0]]
    assert e2e["config"]["data"]["datasets"][0]["pointLabels"] == ["1 users", "2 users", "4 users"]
    assert "base 2 users" in e2e["note"]


def test_names_and_messages_are_escaped() -> None:
    report = _report()
    evil = '</script><script>alert("x")</script>'
    report["scenario"] = evil
    report["run"]["untrustworthy_reasons"] = ["worker worker-1: loop lag p99 80 ms > 50 ms <i onclick=x>"]
    report["run"]["trustworthy"] = False
    report["comparison"] = [{"variant": evil, "metric": "ttft", "stat": "p50", "speedup": 2.0}]
    page = render_html(report)
    assert evil not in page and "<i onclick" not in page
    assert "&lt;/script&gt;&lt;script&gt;alert(&quot;x&quot;)" in page
    assert "loop lag p99 80 ms &gt; 50 ms &lt;i onclick=x&gt;" in page
    assert _data(page)["charts"][-1]["config"]["data"]["labels"] == [f"{evil} · ttft p50"]  # intact as data


def test_breached_slos_and_an_untrustworthy_worker_are_highlighted() -> None:
    report = _report()
    report["run"]["workers"] = {
        "worker-1": {"loop_lag_ms": {"p50": 1.0, "p99": 80.0, "max": 120.0}, "cpu_percent": {"mean": 40, "p90": 60}},
        "worker-2": {"loop_lag_ms": {"p50": 0.2, "p99": 1.0, "max": 2.0}, "cpu_percent": {"mean": 30, "p90": 40}},
    }
    report["run"]["untrustworthy_reasons"] = ["worker worker-1: loop lag p99 80 ms > 50 ms"]
    report["run"]["trustworthy"] = False
    page = render_html(report)
    rows = re.findall(r'<tr class="(\w*)"><td class=text>([^<]+)</td>', page)
    assert ("fail", "worker-1") in rows and ("", "worker-2") in rows
    assert "Not trustworthy" in page and "loop lag p99 80 ms &gt; 50 ms" in page
    # The E2E p50 <= 1 ms SLO is breached by both variants, measured next to its threshold; base's TTFT p99 too,
    # where its 4 % failed requests rank above everything (censored).
    row = r'<tr class="fail"><td class=text>(\w+)</td><td class=text>all</td><td class=text>(\w+)'
    breached = re.findall(row, page)
    assert breached == [("base", "ttft"), ("base", "e2e"), ("fast", "e2e")]
    assert "censored (failed requests)</td><td>p99 ≤ 10,000 ms</td>" in page
    e2e = next(s for s in report["slos"] if s["variant"] == "fast" and s["metric"] == "e2e")
    assert f"{e2e['observed_ms']:,.1f} ms</td><td>p50 ≤ 1 ms</td>" in page


def test_a_run_writes_report_html_beside_the_json(tmp_path: Path) -> None:
    write_reports(_report(), tmp_path)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "html-test" in page
