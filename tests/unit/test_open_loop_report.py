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
    # 32 of the window's 192 arrivals were not sent: the target did not sustain the rate, a breach (exit 1).
    rate = report["slos"][1]
    assert rate["metric"] == "arrivals_sent" and not rate["passed"] and report["exit_code"] == 1
    assert (rate["not_sent"], rate["arrivals"], rate["observed_percent"]) == (32, 192, 83.3333)
    assert "sustained 16 of the requested 20 req/s: 32 of 192 arrivals were not sent (dropped" in rate["note"]
    md = render_markdown(report)
    assert "## Open-loop arrivals" in md and "## Queue delay (connect start − scheduled) (ms)" in md
    assert "sustained 16 of the requested 20 req/s" in md
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


def _overloaded(not_sent: int, sent: int = 100, slos: str = "[]") -> dict:
    """A window of `sent` requests of 1 s each and `not_sent` arrivals never sent (not_sent: failed, censored)."""
    agg = Aggregate()
    g = agg.group("a", "chat")
    for i in range(sent):
        rec = _sent(i, 100.0 + i * 0.05, 0.001)
        rec.done = rec.sent + 1.0
        agg.add(rec, 0.0)
    for _ in range(not_sent):
        g.add_not_sent()
    g.arrivals.update({"sent": sent, "dropped": not_sent})
    doc = OPEN.replace("[{metric: queue_delay, stat: p99, max_ms: 5}]", slos)
    return build_report(parse_scenario(doc), agg, 10.0)


def test_arrivals_never_sent_fail_the_success_rate_and_censor_every_latency() -> None:
    report = _overloaded(not_sent=3, slos="[{metric: success_rate, min_percent: 99}]")
    g = report["variants"][0]["overall"]
    assert (g["requests"], g["ok"], g["errors"]) == (103, 100, {"not_sent": 3})
    assert g["censored"] == {"e2e": 3, "e2e_from_schedule": 3, "tpot": 3, "ttft": 3, "ttft_from_schedule": 3}
    assert g["metrics_ms"]["e2e"]["count"] == 100
    assert [s["passed"] for s in report["slos"]] == [False, False] and report["exit_code"] == 1


def test_the_rate_entry_passes_within_its_allowance_and_says_how_many_senders_the_rate_needs() -> None:
    assert _overloaded(not_sent=1)["exit_code"] == 0  # 1 of 101: within the default 1 %
    report = _overloaded(not_sent=2)  # 2 of 102: 1.96 % > 1 %
    rate = next(s for s in report["slos"] if s["metric"] == "arrivals_sent")
    assert not rate["passed"] and report["exit_code"] == 1
    # Little's law at the E2E measured (1 s from the schedule, the not-sent ones censored): 20 req/s holds ~20.
    assert "raise load.users" in rate["note"] and "~20 requests in flight" in rate["note"]


def test_the_allowance_is_compared_exactly() -> None:
    # 1 not sent of 100,000 arrivals is 0.001 %: allowed at max_not_sent_percent 0.001, refused at 0.0009.
    for allowed, ok in ((0.001, True), (0.0009, False)):
        agg = Aggregate()
        g = agg.group("a", "chat")
        agg.add(_sent(0, 100.0, 0.001), 0.0)
        g.arrivals.update({"sent": 99_999, "dropped": 1})
        doc = OPEN.replace("overflow: drop}", f"overflow: drop, max_not_sent_percent: {allowed}}}")
        report = build_report(parse_scenario(doc), agg, 10.0)
        assert next(s for s in report["slos"] if s["metric"] == "arrivals_sent")["passed"] is ok


TWO = """
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m, weight: 3}
  - {name: b, base_url: "http://127.0.0.1:2", model: m}
load: {users: 16, arrival: {kind: poisson, rate: 20}, overflow: drop}
"""


def _two_variants(run: dict | None) -> dict:
    """Both variants overloaded alike: 100 sent requests of 1 s each and 10 arrivals never sent."""
    agg = Aggregate()
    for name in ("a", "b"):
        g = agg.group(name, "chat")
        for i in range(100):
            rec = _sent(i, 100.0 + i * 0.05, 0.001)
            rec.request_id, rec.variant, rec.done = f"{name}-{i}", name, rec.sent + 1.0
            agg.add(rec, 0.0)
        for _ in range(10):
            g.add_not_sent()
        g.arrivals.update({"sent": 100, "dropped": 10})
    return build_report(parse_scenario(TWO), agg, 10.0, run)


def test_senders_are_each_variants_own_share_of_the_users() -> None:
    from loadgen.report.vllm_bench import vllm_bench_results

    # What the run counted: users are split over the variants by weight (3:1), never 16 to each.
    report = _two_variants({"workers": {}, "untrustworthy_reasons": [], "users_per_variant": {"a": 12, "b": 4}})
    assert [v["open_loop"]["senders"] for v in report["variants"]] == [12, 4]
    assert [r["max_concurrency"] for r in vllm_bench_results(report)] == [12, 4]
    notes = {s["variant"]: s["note"] for s in report["slos"] if s["metric"] == "arrivals_sent"}
    assert "all 4 senders were busy" in notes["b"] and "all 12 senders" in notes["a"]
    # Little's law: 20 req/s at ~1 s needs ~20 in flight; b has 4 of the 16 users, so load.users must reach 80.
    assert "b has 4 senders (its share of load.users 16 by weight): load.users 80 or more" in notes["b"]
    assert "a has 12 senders (its share of load.users 16 by weight): load.users 27 or more" in notes["a"]
    assert "as it has senders (users: load.users split by weight): a 12, b 4." in render_markdown(report)
    # A report whose run did not count them (rebuilt from raw records): the scenario's weighted split.
    rebuilt = _two_variants(None)
    assert [v["open_loop"]["senders"] for v in rebuilt["variants"]] == [12, 4]
