"""Agent sessions in the verdict (measure/sessions.py): a session's fate from its steps' through the fate table, its
duration measured or censored, the sums, the wire, and the pair keys of its sub-agents' steps."""

from __future__ import annotations

from array import array

import pytest

from loadgen.measure.aggregate import Aggregate
from loadgen.measure.fates import FATES, Fate
from loadgen.measure.pairs import pair_key
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.measure.sessions import SessionFate, SessionStats, SessionTally, session_fate


def _step(rid: str, sent: float, done: float, turn: int = 1, **kw: object) -> RequestRecord:
    rec = RequestRecord(rid, "a", "agent", sent=sent, done=done, turn=turn, prompt_tokens=100, output_tokens=10)
    rec.chunk_times = array("d", [sent + 0.05, done])
    rec.chunk_tokens = array("l", [1, 9])
    rec.goodput_misses = ()
    for k, v in kw.items():
        setattr(rec, k, v)
    return rec


def _tally(*records: RequestRecord, ended: float | None = None, stopped: bool = False) -> SessionTally:
    t = SessionTally("0-1", "a", "agent", list(records), tool_s=1.0, subagents=1, stopped=stopped)
    t.ended = ended
    return t


@pytest.mark.parametrize(
    ("steps", "stopped", "ended", "fate"),
    [
        ({}, False, 9.0, SessionFate.COMPLETED),
        ({"warmup": True}, False, 9.0, SessionFate.IN_WARMUP),
        ({"error": ErrorKind.HTTP_5XX}, False, None, SessionFate.FAILED),
        ({"error": ErrorKind.TIMEOUT}, False, None, SessionFate.FAILED),
        ({"cut_by_stop": True}, True, None, SessionFate.CUT),
        ({"cancelled": "time"}, False, None, SessionFate.CUT),
        ({}, True, None, SessionFate.CUT),  # the stop came while its tools ran
    ],
)
def test_a_sessions_fate_is_read_from_its_steps_through_the_fate_table(
    steps: dict[str, object], stopped: bool, ended: float | None, fate: SessionFate
) -> None:
    first = _step("w-a-0-1", 1.0, 2.0, warmup=bool(steps.get("warmup")))
    later = _step("w-a-0-1-t2", 3.0, 9.0, 2, **{k: v for k, v in steps.items() if k != "warmup"})
    assert session_fate(_tally(first, later, ended=ended, stopped=stopped)) is fate


def test_every_fate_row_says_what_it_makes_its_session() -> None:
    assert {row.session for row in FATES.values()} == {"goes on", "fails it", "cuts it", "leaves it out"}
    assert FATES[Fate.DRAINED].session == "goes on" and FATES[Fate.NOT_SENT].session == "fails it"


def test_cut_and_failed_sessions_are_censored_above_every_completed_one() -> None:
    stats = SessionStats()
    for i in range(8):  # completed in 10 + i seconds
        stats.add(_tally(_step(f"w-a-0-{i}", 0.0, 10.0 + i), ended=10.0 + i), window_end=100.0, judged=False)
    stats.add(_tally(_step("w-a-0-8", 0.0, 1.0), stopped=True), window_end=100.0, judged=False)
    stats.add(_tally(_step("w-a-0-9", 0.0, 1.0, error=ErrorKind.HTTP_5XX)), window_end=100.0, judged=False)
    summary = stats.duration.summary_ms(stats.censored)
    assert stats.fates == {"completed": 8, "cut": 1, "failed": 1} and stats.in_window == 10
    # p50 among the completed; p95 among the two censored (a cut or failed session did not end fast).
    assert summary["p50"] is not None and 10_000 <= summary["p50"] <= 18_100
    assert summary["p95"] is None and summary["censored"] == 2
    assert stats.completed == 8 and stats.completed_in_window == 8 and stats.good == 8
    assert stats.tool_s == 8.0 and stats.subagents == 8


def test_a_session_is_good_only_when_every_step_met_every_bound() -> None:
    stats = SessionStats()
    ok = _tally(_step("w-a-0-1", 0.0, 1.0), _step("w-a-0-1-t2", 1.5, 2.0, 2), ended=2.0)
    slow = _tally(_step("w-a-0-2", 0.0, 1.0), _step("w-a-0-2-t2", 1.5, 9.0, 2, goodput_misses=("e2e",)), ended=9.0)
    late = _tally(_step("w-a-0-3", 0.0, 1.0), ended=120.0)
    for t in (ok, slow, late):
        stats.add(t, window_end=100.0, judged=True)
    assert stats.good == 2 and stats.goodput_judged == 3  # the slow step's session is not good
    assert stats.completed_in_window == 2  # the one that ended after the window is not in sessions / h


def test_sessions_travel_on_the_wire_and_merge() -> None:
    worker = Aggregate()
    worker.add_session(_tally(_step("w-a-0-1", 0.0, 3.0), ended=3.0), judged=False)
    worker.add_session(_tally(_step("w-a-0-2", 0.0, 1.0), stopped=True), judged=False)
    worker.session("a", "agent").add_not_sent()
    master = Aggregate()
    master.merge_wire(worker.pop_delta())
    master.merge_wire(worker.pop_delta())  # nothing twice: a delta ships what accumulated since the last
    s = master.sessions[("a", "agent")]
    assert s.fates == {"completed": 1, "cut": 1, "not_sent": 1} and s.censored == 2
    assert s.duration.count == 1 and s.steps == 1 and s.input_tokens == 100


@pytest.mark.parametrize(
    ("rid", "turn", "key"),
    [
        ("w0-a-3-17", 1, "3-17-1"),
        ("w0-a-3-17-t4", 4, "3-17-4"),
        ("w0-a-3-17-b2", 1, "3-17-b2-1"),
        ("w0-a-3-17-b2.1-t3", 3, "3-17-b2.1-3"),
        ("w0-a-3-17-bx-t3", 3, None),
    ],
)
def test_a_sub_agents_steps_pair_across_variants(rid: str, turn: int, key: str | None) -> None:
    assert pair_key(RequestRecord(rid, "a", "agent", turn=turn)) == key


def _ran(agg: Aggregate, variant: str, task: int, seconds: float, cut: bool = False) -> None:
    rec = _step(f"w-{variant}-0-{task}", 0.0, seconds)
    rec.variant = variant
    tally = SessionTally(f"0-{task}", variant, "agent", [rec], stopped=cut)
    tally.ended = None if cut else seconds
    agg.add_session(tally, judged=False)


def test_the_paired_session_comparison_is_task_by_task_and_cut_sessions_never_help() -> None:
    from loadgen.report.session_compare import session_comparison

    agg = Aggregate()
    for task in range(60):
        _ran(agg, "base", task, 10.0 + task)
        # Twice as slow on every task; its five slowest tasks were still running at the stop.
        _ran(agg, "slow", task, 2 * (10.0 + task), cut=task >= 55)
    entries = {e["stat"]: e for e in session_comparison(agg, ["base", "slow"], "base", seed=3)}
    p50 = entries["p50"]
    assert p50["paired"] is True and p50["n"] == 60 and p50["metric"] == "session_duration"
    assert p50["speedup"] == pytest.approx(0.5, abs=0.02)
    assert p50["ci_high"] < 1.0  # slower, and the interval says so
    # Its p99 falls among the cut sessions: unknown, reported censored — not the faster figure dropping them gives.
    assert entries["p99"]["speedup"] is None and entries["p99"]["censored"] is True
    assert session_comparison(Aggregate(), ["base", "slow"], "base", seed=3) == []
