"""A few agent sessions step by step (measure/sessions.py `SessionTimelines`): bounded, the same tasks on every
variant, mergeable from workers in any order, its offsets the records' own; in report.json as
`variants[].sessions_timeline`, which the schema accepts."""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import pytest

from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import WIRE_VERSION, Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.measure.sessions import (
    STEP_FIELDS,
    TIMELINE_CAP,
    TIMELINE_STEP_CAP,
    SessionFate,
    SessionTally,
    SessionTimelines,
)
from loadgen.report.build import build_report
from loadgen.report.combine import read_aggregate, write_aggregate
from tests.report_schema import checked

SCENARIO = """
name: timelines
variants:
  - {name: base, base_url: "http://127.0.0.1:1", model: m, baseline: true}
  - {name: fast, base_url: "http://127.0.0.1:2", model: m}
"""


def _step(variant: str, task: int, sent: float, ttft: float, done: float, turn: int, branch: str = "") -> RequestRecord:
    rid = f"w0-{variant}-0-{task}" + (f"-b{branch}" if branch else "") + (f"-t{turn}" if turn > 1 else "")
    rec = RequestRecord(rid, variant, "agent", sent=sent, done=done, turn=turn, prompt_tokens=100, output_tokens=10)
    rec.chunk_times = array("d", [sent + ttft, done])
    rec.chunk_tokens = array("l", [1, 9])
    rec.goodput_misses = ()
    return rec


def _task(variant: str, task: int, speed: float = 1.0, fail: bool = False) -> SessionTally:
    """Two steps of the top-level agent with 1.5 s of tools between, a sub-agent of one step beside them."""
    t0 = 100.0 + task
    top1 = _step(variant, task, t0, 0.2 * speed, t0 + 1.0 * speed, 1)
    sub = _step(variant, task, t0 + 1.0 * speed, 0.1 * speed, t0 + 1.8 * speed, 1, branch="1")
    top2 = _step(variant, task, t0 + 2.5 * speed, 0.3 * speed, t0 + 4.0 * speed, 2)
    if fail:
        top2.error, top2.chunk_times, top2.done = ErrorKind.HTTP_5XX, array("d"), t0 + 2.6 * speed
    tally = SessionTally(f"0-{task}", variant, "agent", [top1, sub, top2], tool_s=1.5 * speed, subagents=1)
    tally.tool_waits = {top1.request_id: 1.5 * speed, sub.request_id: 0.0}
    tally.ended = None if fail else top2.done
    return tally


def _run(agg: Aggregate, variant: str, tasks: range, speed: float = 1.0) -> None:
    for task in tasks:
        tally = _task(variant, task, speed, fail=task % 7 == 3)
        for rec in tally.records:
            assert rec.done is not None
            agg.add(rec, 1_700_000_000.0 + rec.done)
        agg.add_session(tally, judged=False)


def _kept(agg: Aggregate, variant: str) -> list[str]:
    return [s["key"] for s in agg.session_timelines.sessions(variant)]


def test_the_sample_is_bounded_and_keeps_the_same_tasks_on_every_variant() -> None:
    agg = Aggregate()
    _run(agg, "base", range(500))
    _run(agg, "fast", range(500), speed=0.5)
    _run(agg, "late", range(250, 500))  # ran only the later half of the tasks
    base, fast, late = (_kept(agg, v) for v in ("base", "fast", "late"))
    assert TIMELINE_CAP // 2 <= len(base) <= TIMELINE_CAP and base == fast
    assert late == [k for k in base if int(k.split("-")[1]) >= 250]  # of the tasks it ran, the same ones
    # A variant's own rows never grow past the cap, whatever the number of tasks.
    assert all(len(rows) <= TIMELINE_CAP for rows in agg.session_timelines.variants.values())


def test_its_offsets_are_the_records_own() -> None:
    sample = SessionTimelines()
    tally = _task("base", 5, speed=1.0)
    sample.add(tally, SessionFate.COMPLETED)
    (s,) = sample.sessions("base")
    assert (s["key"], s["mix"], s["fate"], s["steps_left_out"]) == ("0-5", "agent", "completed", 0)
    start = tally.records[0].sent
    want = []
    for rec in tally.records:
        assert rec.ttft is not None and rec.done is not None
        branch = "1" if "-b1" in rec.request_id else ""
        tool = tally.tool_waits.get(rec.request_id)
        want.append([branch, rec.turn, (rec.sent - start) * 1e3, rec.ttft * 1e3, (rec.done - start) * 1e3, tool])
    assert len(s["steps"]) == 3 and len(STEP_FIELDS) == 6
    for got, exp in zip(s["steps"], want, strict=True):
        assert got[:2] == exp[:2]
        assert got[2:5] == pytest.approx(exp[2:5], abs=1e-3)
        assert (got[5] is None) == (exp[5] is None) and (exp[5] is None or got[5] == pytest.approx(exp[5] * 1e3))
    assert s["steps"][1][:2] == ["1", 1] and s["steps"][1][5] == 0.0  # the sub-agent's row, no tools after it
    assert s["steps"][2][5] is None  # the last step: no wait known


def test_it_merges_from_workers_as_if_one_process_saw_every_task() -> None:
    whole = Aggregate()
    _run(whole, "base", range(300))
    master, workers = Aggregate(), [Aggregate(), Aggregate(), Aggregate()]
    for i in range(0, 300, 20):  # tasks dealt out in turn, deltas shipped as they go
        w = workers[(i // 20) % 3]
        _run(w, "base", range(i, i + 20))
        wire = w.pop_delta()
        assert wire["v"] == WIRE_VERSION == 14
        master.merge_wire(wire)
    assert master.session_timelines.variants == whole.session_timelines.variants
    assert master.session_timelines.level == whole.session_timelines.level
    # Shipped sessions leave the worker; only its level stays.
    assert all(w.session_timelines.is_empty() for w in workers)
    other = Aggregate()
    other.merge(whole)
    assert _kept(other, "base") == _kept(whole, "base")


def test_it_survives_aggregate_json(tmp_path: Path) -> None:
    agg = Aggregate()
    _run(agg, "base", range(50))
    back = read_aggregate(write_aggregate(agg, tmp_path))
    assert back.session_timelines.sessions("base") == agg.session_timelines.sessions("base") != []


def test_a_long_task_keeps_its_first_steps_and_counts_the_rest() -> None:
    records = [_step("base", 1, 100.0 + k, 0.1, 100.5 + k, k + 1) for k in range(TIMELINE_STEP_CAP + 5)]
    tally = SessionTally("0-1", "base", "agent", records)
    tally.ended = records[-1].done
    sample = SessionTimelines()
    sample.add(tally, SessionFate.COMPLETED)
    (s,) = sample.sessions("base")
    assert len(s["steps"]) == TIMELINE_STEP_CAP and s["steps_left_out"] == 5


def _report() -> dict[str, Any]:
    agg = Aggregate()
    _run(agg, "base", range(40))
    _run(agg, "fast", range(40), speed=0.5)
    return checked(build_report(parse_scenario(SCENARIO), agg, 60.0))


def test_the_report_holds_each_variants_sessions_step_by_step_and_the_schema_accepts_them() -> None:
    report = _report()
    base, fast = (v["sessions_timeline"] for v in report["variants"])
    assert base["step_fields"] == list(STEP_FIELDS) and base["cap"] == TIMELINE_CAP
    assert [s["key"] for s in base["sessions"]] == [s["key"] for s in fast["sessions"]] != []
    assert {s["fate"] for s in base["sessions"]} <= {"completed", "failed"}
    one = fast["sessions"][0]
    assert one["steps"][0][2] == 0.0 and one["steps"][0][3] == pytest.approx(100.0, abs=1e-3)  # 0.2 s x 0.5


def test_a_report_without_agent_sessions_has_no_timeline() -> None:
    agg = Aggregate()
    agg.add(_step("base", 1, 100.0, 0.1, 101.0, 1), 1_700_000_000.0)
    report = checked(build_report(parse_scenario(SCENARIO), agg, 60.0))
    assert all("sessions_timeline" not in v for v in report["variants"])
