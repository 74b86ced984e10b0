"""Priority classes in the results: per (variant, class) what a group keeps, merged across workers exactly, in the
report as each variant's `classes` (and a Markdown table when there are several), and SLOs that name a class."""

from __future__ import annotations

from array import array

import pytest

from loadgen.config.scenario import Scenario, parse_scenario
from loadgen.exit_codes import ExitCode
from loadgen.measure.aggregate import WIRE_VERSION, Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report import build_report, render_markdown

from ..report_schema import checked

SCENARIO = """
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m}
  - {name: b, base_url: "http://127.0.0.1:2", model: m, dialect: tgi}
traffic:
  mixes: [{name: chat}, {name: rag}]
  classes:
    - {name: interactive, share: 3, priority: 0, headers: {X-Priority: high}}
    - {name: batch, priority: 10}
"""


def _rec(i: int, cls: str, ttft: float, variant: str = "a", mix: str = "chat", **kw: object) -> RequestRecord:
    sent = 100.0 + i
    times = array("d", [sent + ttft + 0.01 * k for k in range(5)])
    rec = RequestRecord(f"{variant}-{cls}-{i}", variant, mix, "short", sent=sent, priority_class=cls)
    rec.chunk_times, rec.chunk_tokens = times, array("l", [1] * 5)
    rec.done, rec.output_tokens, rec.prompt_tokens, rec.finish_reason = times[-1], 5, 30, "length"
    for k, v in kw.items():
        setattr(rec, k, v)
    return rec


def _records() -> list[RequestRecord]:
    out = []
    for i in range(60):  # interactive fast, batch slow; both mixes; a few failures, warm-ups and cuts
        out.append(_rec(i, "interactive", 0.05 + 0.0005 * i, mix="chat" if i % 2 else "rag"))
        if i % 3 == 0:
            out.append(_rec(i, "batch", 0.5 + 0.001 * i, mix="chat"))
    out.append(_rec(90, "batch", 0.0, chunk_times=array("d"), chunk_tokens=array("l"), error=ErrorKind.TIMEOUT))
    out.append(_rec(91, "interactive", 0.05, warmup=True))
    out.append(_rec(92, "batch", 0.5, cut_by_stop=True))
    out += [_rec(i, "interactive", 0.08, variant="b") for i in range(10)]
    return out


def _scenario(slos: str = "") -> Scenario:
    return parse_scenario(SCENARIO + slos)


def test_classes_merge_across_workers_as_if_one_process_saw_every_record() -> None:
    alone, w1, w2, master = Aggregate(), Aggregate(), Aggregate(), Aggregate()
    for i, rec in enumerate(_records()):
        alone.add(rec, 0.0)
        (w1 if i % 2 else w2).add(rec, 0.0)
    wire = w1.pop_delta(histograms=False)  # counters now, histograms with a later delta: nothing lost or doubled
    assert wire["v"] == WIRE_VERSION and wire["classes"]
    for delta in (wire, w1.pop_delta(), w2.pop_delta()):
        master.merge_wire(delta)
    assert set(master.classes) == set(alone.classes) == {("a", "interactive"), ("a", "batch"), ("b", "interactive")}
    for key, want in alone.classes.items():
        got = master.classes[key]
        for field in ("requests", "ok", "errors", "censored", "warmup_excluded", "cut_by_stop", "output_tokens"):
            assert getattr(got, field) == getattr(want, field), (key, field)
        assert set(got.hists) == set(want.hists)
        for m, h in want.hists.items():
            assert got.hists[m].encode() == h.encode(), (key, m)
    batch = master.classes[("a", "batch")]
    # The cut request is a censored E2E and TPOT sample (it had run longer than its age), not a request of the
    # success rate.
    censored = {"ttft": 1, "e2e": 2, "tpot": 2}
    assert (batch.requests, batch.ok, batch.errors, batch.censored) == (21, 20, {"timeout": 1}, censored)
    assert (batch.cut_by_stop, master.classes[("a", "interactive")].warmup_excluded) == (1, 1)
    # The classes split the variant's requests: together they are its merged groups, sample for sample.
    merged = master.merged_variant("a")
    both = master.classes[("a", "interactive")]
    both.merge(master.classes[("a", "batch")])
    assert (both.requests, both.ok) == (merged.requests, merged.ok)
    assert both.hists["ttft"].encode() == merged.hists["ttft"].encode()


def test_records_of_no_class_add_to_no_class() -> None:
    agg = Aggregate()
    agg.add(_rec(1, "", 0.1), 0.0)
    assert agg.classes == {} and agg.groups[("a", "chat")].requests == 1
    report = build_report(parse_scenario(SCENARIO.split("  classes:")[0]), agg, 10.0)
    assert all("classes" not in v for v in report["variants"])
    assert "## Priority classes" not in render_markdown(report)


def test_report_gives_each_variant_its_classes() -> None:
    agg = Aggregate()
    for rec in _records():
        agg.add(rec, 0.0)
    report = checked(build_report(_scenario(), agg, 10.0))
    a, b = report["variants"]
    assert list(a["classes"]) == ["interactive", "batch"]  # the scenario's order
    inter, batch = a["classes"]["interactive"], a["classes"]["batch"]
    assert (inter["requests"], batch["requests"], a["overall"]["requests"]) == (60, 21, 81)
    assert inter["share"] == round(60 / 81, 4) and inter["configured_share"] == 0.75
    assert (inter["priority"], inter["priority_sent"], inter["headers"]) == (0, True, ["X-Priority"])
    assert (batch["success_rate"], batch["errors"]) == (round(20 / 21, 6), {"timeout": 1})
    # 60 TTFTs of 50-79.5 ms; the batch p50 among 20 of 500-557 ms (and one censored failure above them all).
    assert inter["metrics_ms"]["ttft"]["p50"] == pytest.approx(64.75, rel=0.01)
    assert batch["metrics_ms"]["ttft"]["p50"] == pytest.approx(530.0, rel=0.01)
    assert batch["metrics_ms"]["ttft"]["censored"] == 1
    # tgi has no priority field: its classes went out with their headers only, and say so.
    assert b["classes"]["interactive"]["priority_sent"] is False and b["classes"]["batch"]["requests"] == 0
    md = render_markdown(report)
    assert "## Priority classes (ms)" in md
    assert "| a | interactive | 0 | 60 | 74.1 % (75.0 %) | 60 | 100.00 % |" in md
    assert "| b | interactive | 0 (not sent) | 10 |" in md
    assert "no priority field for `b` (tgi)" in md


def test_one_class_is_reported_but_needs_no_table() -> None:
    agg = Aggregate()
    agg.add(_rec(1, "paid", 0.1), 0.0)
    text = SCENARIO.split("  classes:")[0] + "  classes: [{name: paid}]\n"
    report = build_report(parse_scenario(text), agg, 10.0)
    assert report["variants"][0]["classes"]["paid"]["requests"] == 1
    assert "## Priority classes" not in render_markdown(report)


def test_slos_per_class_judge_that_class_alone() -> None:
    slos = """slos:
  - {metric: ttft, stat: p50, max_ms: 100, class: interactive}
  - {metric: ttft, stat: p50, max_ms: 100, class: batch}
  - {metric: success_rate, min_percent: 99, class: batch}
  - {metric: ttft, stat: p50, max_ms: 1000}
"""
    agg = Aggregate()
    for rec in _records():
        agg.add(rec, 0.0)
    report = checked(build_report(_scenario(slos), agg, 10.0))
    by = {(s["variant"], s["class"], s["metric"], s["max_ms"]): s for s in report["slos"]}
    classes = report["variants"][0]["classes"]
    fast = by[("a", "interactive", "ttft", 100.0)]
    slow = by[("a", "batch", "ttft", 100.0)]
    assert fast["passed"] and fast["observed_ms"] == classes["interactive"]["metrics_ms"]["ttft"]["p50"]
    assert not slow["passed"] and slow["observed_ms"] == classes["batch"]["metrics_ms"]["ttft"]["p50"]
    rate = by[("a", "batch", "success_rate", None)]
    assert not rate["passed"] and rate["observed_percent"] == pytest.approx(100 * 20 / 21, abs=1e-3)
    assert by[("a", None, "ttft", 1000.0)]["passed"]
    # Variant b sent no batch request: no data is no pass.
    assert not by[("b", "batch", "ttft", 100.0)]["passed"] and by[("b", "batch", "ttft", 100.0)]["observed_ms"] is None
    assert report["exit_code"] == ExitCode.SLO_BREACHED
    md = render_markdown(report)
    assert "| variant | mix | class | SLO | observed | result |" in md
    assert "| a | all | batch | ttft p50 ≤ 100 ms |" in md
