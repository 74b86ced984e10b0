"""The report of an open-loop run: requested vs achieved rate, what became of every arrival, queue delay."""

from __future__ import annotations

from array import array

from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import RequestRecord
from loadgen.report import build_report, render_markdown

OPEN = """
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m}
load: {users: 4, arrival: {kind: gamma, rate: 20, burstiness: 0.5}, overflow: drop}
slos: [{metric: queue_delay, stat: p99, max_ms: 5}]
"""


def _sent(i: int, scheduled: float, lag: float) -> RequestRecord:
    sent = scheduled + lag
    rec = RequestRecord(f"a-{i}", "a", "chat", scheduled=scheduled, sent=sent)
    rec.chunk_times = array("d", [sent + 0.05, sent + 0.06])
    rec.chunk_tokens = array("l", [1, 1])
    rec.done = sent + 0.06
    rec.finish_reason = "stop"
    return rec


def test_requested_vs_achieved_rate_and_every_arrival_counted() -> None:
    agg = Aggregate()
    for i in range(150):
        agg.add(_sent(i, 100.0 + i * 0.05, 0.002 if i < 149 else 0.2), 0.0)
    counts = agg.group("a", "chat").arrivals
    counts.update({"sent": 160, "dropped": 30, "unsent_at_stop": 2, "in_warmup": 5})
    report = build_report(parse_scenario(OPEN), agg, 10.0)
    v = report["variants"][0]
    o = v["open_loop"]
    assert (o["kind"], o["burstiness"], o["overflow"], o["senders"]) == ("gamma", 0.5, "drop", 4)
    assert o["requested_rate_per_s"] == 20.0
    assert o["achieved_rate_per_s"] == 16.0 and o["achieved_share"] == 0.8
    assert (o["sent"], o["dropped"], o["unsent_at_stop"], o["in_warmup"], o["arrivals"]) == (160, 30, 2, 5, 197)
    assert v["mixes"]["chat"]["arrivals"] == {"dropped": 30, "in_warmup": 5, "sent": 160, "unsent_at_stop": 2}
    qd = v["overall"]["metrics_ms"]["queue_delay"]
    assert qd["count"] == 150 and 1.9 < qd["p50"] < 2.1 and qd["max"] > 190
    slo = report["slos"][0]
    assert slo["metric"] == "queue_delay" and slo["passed"]  # p99 = 2 ms: the one late arrival is the max
    md = render_markdown(report)
    assert "## Open-loop arrivals" in md and "## Queue delay (sent − scheduled) (ms)" in md
    assert "| a | 20.00 | 16.00 | 80.0 % | 160 | 30 | 2 | 5 |" in md


def test_closed_loop_reports_no_open_loop_figures() -> None:
    agg = Aggregate()
    rec = _sent(0, 0.0, 0.0)
    rec.scheduled = None
    agg.add(rec, 0.0)
    report = build_report(parse_scenario(OPEN.split("load:")[0]), agg, 10.0)
    assert "open_loop" not in report["variants"][0]
    assert "arrivals" not in report["variants"][0]["overall"]
    assert "Open-loop" not in render_markdown(report)
