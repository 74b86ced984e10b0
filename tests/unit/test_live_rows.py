"""The live views' numbers: the cheap live summary gives the report's figures, and the LLM tab's rows say them.

`live_summary` skips most of `build_report`'s work; these tests hold it to the report on runs whose truth is known:
two variants over two mixes, failures before and after the first token (censored tails), an SLO failing, a
mean-based SLO (the exact path), a worker whose loop lagged, and agent sessions (one variant's mostly cut).
"""

from __future__ import annotations

import random
from array import array

from loadgen.config.scenario import parse_scenario
from loadgen.live.summary import live_summary
from loadgen.live.web_rows import (
    ALL_MIXES,
    SESSIONS_TAB,
    TABLES,
    extended_stats,
    llm_rows,
    session_rows,
    tabs_for,
    worker_rows,
)
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.records import RequestRecord
from loadgen.measure.sessions import SessionStats
from loadgen.report import build_report
from loadgen.report.markdown import render_markdown
from loadgen.report.numbers import ms

SCENARIO = """
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m}
  - {name: b, base_url: "http://127.0.0.1:2", model: m}
traffic:
  mixes: [{name: chat, weight: 1}, {name: rag, weight: 1}]
slos:
  - {metric: ttft, stat: p99, max_ms: 80}
  - {metric: e2e, stat: p90, max_ms: 5000, mix: rag}
  - {metric: tpot, stat: mean, max_ms: 50}
  - {metric: success_rate, min_percent: 95}
"""


def _record(rng: random.Random, i: int, variant: str, mix: str) -> RequestRecord:
    sent = 100.0 + i * 0.01
    rec = RequestRecord(f"{variant}-{i}", variant, mix, sent=sent)
    n = rng.randint(3, 30)
    t = sent + rng.lognormvariate(-3.2, 0.5) * (2 if variant == "b" else 1)
    for _ in range(n):
        rec.chunk_times.append(t)
        t += rng.expovariate(1 / 0.012)
    rec.chunk_tokens = array("l", [1] * n)
    rec.done = t
    rec.output_tokens, rec.prompt_tokens, rec.finish_reason = n, 40, "length"
    roll = rng.random()
    if roll < 0.005:  # failed before its first token: censored TTFT and E2E
        rec.chunk_times, rec.chunk_tokens = array("d"), array("l")
        rec.error, rec.output_tokens = "timeout", None
    elif roll < 0.02:  # failed mid-stream: its TTFT counts, its E2E is censored
        rec.error = "http_5xx"
    return rec


def _aggregate(n: int = 3000) -> Aggregate:
    rng = random.Random(5)
    agg = Aggregate()
    for i in range(n):
        agg.add(_record(rng, i, "ab"[i % 2], ("chat", "rag")[(i // 2) % 2]), 1_700_000_000.0 + i / 100)
    return agg


RUN = {
    "workers": {
        "worker-0": {"loop_lag_ms": {"count": 500, "p99": 1.2}, "cpu_percent": {"mean": 20, "p90": 30, "max": 35}},
        "worker-1": {"loop_lag_ms": {"count": 500, "p99": 250.0}, "cpu_percent": {"mean": 20, "p90": 31, "max": 40}},
    },
    "untrustworthy_reasons": ["worker worker-1: event-loop lag p99 250.0 ms > 50 ms (the load generator was busy)"],
    "lost_workers": [],
}


def test_the_live_rows_are_the_reports_rows() -> None:
    scenario, agg = parse_scenario(SCENARIO), _aggregate()
    summary = live_summary(scenario, agg, 30.0, dict(RUN))
    report = build_report(scenario, agg, 30.0, dict(RUN))
    rows = llm_rows(summary)
    assert rows == llm_rows(report)
    assert [(r["variant"], r["mix"]) for r in rows] == [
        ("a", ALL_MIXES), ("a", "chat"), ("a", "rag"), ("b", ALL_MIXES), ("b", "chat"), ("b", "rag"),
    ]  # fmt: skip
    assert summary["slos"] == [{k: v for k, v in s.items() if k != "breaching_requests"} for s in report["slos"]]
    a = rows[0]
    overall = report["variants"][0]["overall"]
    assert a["requests"] == overall["requests"] and a["ttft_p99_ms"] == ms(overall["metrics_ms"]["ttft"]["p99"])
    assert "timeout" in a["errors"] and "http_5xx" in a["errors"]
    assert a["e2e_p99_ms"] == "censored" and float(a["e2e_p50_ms"]) > 0  # 2 % failed: the tail is unknown
    # b's TTFT p99 is twice a's (~80 ms): its overall row fails that SLO and says by how much now.
    b = rows[3]
    assert b["slo"].startswith("FAIL") and "ttft p99 ≤ 80 ms (now" in b["slo"], b["slo"]
    # The rag rows carry the rag-only SLO, the chat rows none.
    assert rows[2]["slo"] == "pass (1)" and rows[1]["slo"] == "—"
    assert all(r["trust"].startswith("NOT TRUSTWORTHY: worker worker-1: event-loop lag") for r in rows)
    # Something crashed (a worker's greenlet): the tab says the run failed, over any other trust.
    crashed = llm_rows(live_summary(scenario, agg, 30.0, {**RUN, "failed": ["worker-0: unhandled exception …"]}))
    assert all(r["trust"] == "RUN FAILED: worker-0: unhandled exception …" for r in crashed)


def test_worker_rows_judge_each_worker_and_name_the_lost() -> None:
    rows = worker_rows({"run": {**RUN, "lost_workers": ["worker-2"]}})
    assert [(r["worker"], r["loop_lag_p99_ms"], r["trust"].split(":")[0]) for r in rows] == [
        ("worker-0", "1.20", "ok"), ("worker-1", "250.00", "NOT TRUSTWORTHY"), ("worker-2", "—", "lost"),
    ]  # fmt: skip
    left = worker_rows({"run": {**RUN, "workers_left": {"worker-0": 4.5, "worker-1": 2.0}}})
    assert [r["trust"].split(":")[0] for r in left] == ["ok, left 4.5 s in", "NOT TRUSTWORTHY"]
    assert rows[1]["trust"] == "NOT TRUSTWORTHY: event-loop lag p99 250.0 ms > 50 ms (the load generator was busy)"


def test_every_row_has_exactly_the_tables_columns() -> None:
    summary = live_summary(parse_scenario(SCENARIO), _aggregate(300), 3.0, dict(RUN))
    stats = {e["key"]: e["data"] for e in extended_stats(summary)}
    for table in TABLES:
        if table["key"] == SESSIONS_TAB:  # no agent mix here: its rows are held below
            continue
        keys = [c["key"] for c in table["structure"]]
        assert keys and all(k == k.lower() and " " not in k for k in keys)  # snake_case, as Locust's page expects
        assert stats[table["key"]] and all(list(r) == keys for r in stats[table["key"]])


def test_an_empty_run_has_rows_without_numbers() -> None:
    rows = llm_rows(live_summary(parse_scenario(SCENARIO), Aggregate(), 0.0, {"workers": {}}))
    assert [(r["requests"], r["req_per_s"], r["ttft_p50_ms"]) for r in rows] == [(0, "—", "—"), (0, "—", "—")]
    assert rows[0]["slo"].startswith("FAIL") and "(no data yet)" in rows[0]["slo"]


def test_percentiles_ms_are_summary_ms_values() -> None:
    rng = random.Random(3)
    for gen in (lambda: rng.lognormvariate(-3, 1.5), lambda: rng.uniform(0.2, 0.9), lambda: 0.05):
        h = LatencyHistogram()
        for _ in range(5000):
            h.record(gen())
        for censored in (0, 40, 6000):
            full = h.summary_ms(censored)
            names = ["p50", "p90", "p99", "p99.9"]
            assert h.percentiles_ms([float(n[1:]) for n in names], censored) == [full.get(n) for n in names]
    assert LatencyHistogram().percentiles_ms([50, 99]) == [None, None]


def test_the_tab_rounds_as_the_reports_do() -> None:
    # The figures the issue saw unrounded: 1.8999 req/s and 41.759 ms (the JSON keeps those digits, for tools).
    scenario = parse_scenario(SCENARIO)
    report = build_report(scenario, _aggregate(), 30.0, dict(RUN))
    g = report["variants"][0]["overall"]
    g["requests_per_s"], g["output_tokens_per_s"] = 1.8999, 1234.5678
    g["metrics_ms"]["ttft"] |= {"p50": 41.759, "p99": 1041.75}
    report["slos"][0] |= {"passed": False, "observed_ms": 1041.75}
    row = llm_rows(report)[0]
    assert (row["req_per_s"], row["output_tok_per_s"]) == ("1.90", "1,234.6")
    assert (row["ttft_p50_ms"], row["ttft_p99_ms"]) == ("41.8", "1,041.8")
    assert "(now 1,041.8 ms)" in row["slo"], row["slo"]
    # ... exactly as the Markdown report writes the same figures: its summary line and throughput row of variant a.
    md = render_markdown(report).splitlines()
    summary = next(x for x in md if x.startswith("| a ") and " / " in x)
    assert "| 1.90 |" in summary and "| 41.8 / 1,041.8 |" in summary, summary
    throughput = next(x for x in md if x.startswith("| a | **all** |"))
    assert "| 1.90 | 1,234.6 |" in throughput, throughput


AGENT_SCENARIO = """
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m, cost: {gpus: 2, usd_per_gpu_hour: 2.0}}
  - {name: b, base_url: "http://127.0.0.1:2", model: m}
traffic:
  mixes: [{name: chat, weight: 1}, {name: agent, weight: 1}]
"""


def _with_sessions(agg: Aggregate) -> Aggregate:
    rng = random.Random(9)
    for variant, done, cut in (("a", 30, 2), ("b", 3, 6)):  # b: most of its sessions cut, its p50 censored
        s = agg.sessions.setdefault((variant, "agent"), SessionStats())
        durations = [rng.uniform(20, 200) for _ in range(done)]
        for d in durations:
            s.duration.record(d)
        s.fates, s.censored = {"completed": done, "cut": cut}, cut
        s.completed = s.completed_in_window = s.good = done
        s.steps, s.duration_s, s.input_tokens, s.cached_tokens, s.cache_reported_tokens = (
            5 * done,
            sum(durations),
            9,
            4,
            8,
        )
        s.model_s, s.tool_s = 0.7 * s.duration_s, 0.3 * s.duration_s
    return agg


def test_agent_sessions_live_are_the_reports_and_their_tab_its_section() -> None:
    scenario = parse_scenario(AGENT_SCENARIO)
    agg = _with_sessions(_aggregate(300))
    run = {**RUN, "users_per_variant": {"a": 3, "b": 3}, "sessions_in_flight": [["a", "agent", 2]]}
    summary = live_summary(scenario, agg, 600.0, run)
    report = build_report(scenario, agg, 600.0, dict(run))
    assert [v["sessions"] for v in summary["variants"]] == [v["sessions"] for v in report["variants"]]
    rows = session_rows(summary)
    assert rows == session_rows(report) and [(r["variant"], r["mix"]) for r in rows] == [("a", "agent"), ("b", "agent")]
    # Each row says what report.md's "Agent sessions" row says, cell for cell.
    md = render_markdown(report).splitlines()
    for r in rows:
        line = next(x for x in md if x.startswith(f"| {r['variant']} | agent | "))
        cells = [str(v) for k, v in r.items() if k != "in_flight"]  # live only: the tasks under way now
        assert line == "| " + " | ".join(cells).replace("—", "–") + " |"  # (the tab's dash for none)
    assert [r["in_flight"] for r in rows] == [2, 0]
    assert rows[0]["sessions_per_hour"] == "180.0" and rows[0]["sessions_per_hour_per_gpu"] == "90.0"
    assert rows[1]["duration_p50_ms"] == "censored" and rows[1]["sessions_per_hour_per_gpu"] == "—"
    stats = {e["key"]: e["data"] for e in extended_stats(summary)}
    assert stats[SESSIONS_TAB] == rows
    sessions_table = next(t for t in TABLES if t["key"] == SESSIONS_TAB)
    assert all(list(r) == [c["key"] for c in sessions_table["structure"]] for r in rows)
    # The tab is shown only for a scenario with agent mixes; a run without sessions has no section and no rows.
    assert SESSIONS_TAB in {t["key"] for t in tabs_for(True)} - {t["key"] for t in tabs_for(False)}
    plain = live_summary(parse_scenario(SCENARIO), _aggregate(300), 3.0, dict(RUN))
    assert not any("sessions" in v for v in plain["variants"]) and session_rows(plain) == []
