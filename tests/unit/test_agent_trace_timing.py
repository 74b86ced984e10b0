"""An agentic trace replayed on its recorded clock (`traffic.agent_trace.timing: offsets`): each call's due time from
the reader's offsets (idle stretches cut to `max_gap`, `time_scale`), sub-agents on their root's clock; the runner's
wait for it and the slip it records; the slip in the session figures and report.md. The replay against the
simulator: tests/integration/test_agent_trace_offsets.py."""

from __future__ import annotations

import time
from importlib import resources
from pathlib import Path
from typing import Any

import gevent
import pytest
import yaml

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import Scenario, parse_scenario
from loadgen.locust_plugin.agent_runner import _on_clock
from loadgen.measure.records import RequestRecord
from loadgen.measure.sessions import SessionStats, SessionTally
from loadgen.report.sessions import session_figures, session_lines
from loadgen.traffic.agent_traces import read_agent_trace
from loadgen.traffic.sampler import sampler_for
from loadgen.traffic.trace_agent import TraceAgentSession

TRACES = Path(str(resources.files("loadgen") / "examples" / "traces"))
WEKA = TRACES / "weka-agent-sample.jsonl"
OTEL = TRACES / "otel-agent-sample.jsonl"


def _scenario(path: Path = WEKA, **fields: Any) -> Scenario:
    return Scenario.model_validate(
        {
            "name": "t",
            "variants": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}],
            "traffic": {"agent_trace": {"path": str(path), **fields}},
            "load": {"users": 2, "duration": "5s"},
        }
    )


def _dues(sc: Scenario, index: int) -> dict[str, list[tuple[float | None, float]]]:
    """The task request ``index`` opens, walked as the runner walks it: per agent path, per step (due_s, the pause's
    wait after it)."""
    sampler = sampler_for(sc, 0)
    task = sampler.agent_task(sampler.spec_at(index))
    assert isinstance(task, TraceAgentSession)
    out: dict[str, list[tuple[float | None, float]]] = {}
    todo = [task]
    while todo:
        agent = todo.pop(0)
        steps = out.setdefault(agent.first.branch, [])
        while True:
            due = agent.due_s
            pause = agent.after("one two", 2)
            steps.append((due, pause.wait_s))
            todo += [c for c in pause.children if isinstance(c, TraceAgentSession)]
            if agent.over:
                break
            agent.next_step([])
    return out


def _rounded(values: list[float | None]) -> list[float | None]:
    return [None if v is None else round(v, 6) for v in values]


def test_offsets_are_the_recorded_starts_without_a_cap() -> None:
    for path in (WEKA, OTEL):
        for root in read_agent_trace(str(path)):
            for s in root.walk():
                assert [c.offset_s for c in s.calls] == [c.at_s for c in s.calls]


def test_an_idle_stretch_longer_than_the_cap_is_cut_and_later_offsets_move_up() -> None:
    fanout = read_agent_trace(str(WEKA), max_gap_s=1)[0]
    # Busy 0–4, 6–9 (root), 9.5–12 (its two sub-agents' first calls), …; idle 4–6 (2 s: 1 cut), 12–15.5 (2.5 cut),
    # 18–21.5 (2.5), 24–31 (6), 36–40 (3), 44–345 (300).
    assert [c.offset_s for c in fanout.calls] == [0.0, 5.0, 19.0, 25.0, 30.0]
    a0, a1 = (k.session for k in fanout.children)
    assert [c.offset_s for c in a0.calls] == [8.5, 12.0, 15.5]
    assert [c.offset_s for c in a1.calls] == [9.0, 12.5, 16.0]
    # The same idle, capped per gap in gaps timing: the 301 s gap before the last call is 1 s.
    assert fanout.calls[4].gap_before_s == 1.0


def test_the_parents_idle_while_a_sub_agent_runs_is_not_idle() -> None:
    # background: the root's call 0 ends at 3 s, its next starts at 6 s (a 3 s gap); its sub-agent's call runs 4–6 s,
    # its second 9–11 s, beside the root's 6–9 s; the root's last call starts at 14 s, after 3 s with nothing in flight.
    background = read_agent_trace(str(WEKA), max_gap_s=2)[2]
    assert background.calls[1].gap_before_s == 2.0  # gaps: capped
    assert [c.offset_s for c in background.calls] == [0.0, 6.0, 13.0]  # offsets: only the 11–14 s stretch is cut


def test_due_times_run_on_the_roots_clock_from_its_first_call() -> None:
    dues = _dues(_scenario(max_gap="1s"), 0)
    assert _rounded([d for d, _ in dues[""]]) == [0.0, 5.0, 19.0, 25.0, 30.0]
    assert _rounded([d for d, _ in dues["1"]]) == [8.5, 12.0, 15.5]
    assert _rounded([d for d, _ in dues["2"]]) == [9.0, 12.5, 16.0]
    assert all(wait == 0 for steps in dues.values() for _, wait in steps)  # the due time replaces the gap
    # OTel: the root's first call starts 0.5 s into the trace; its sub-agents' calls are due from that call.
    otel = _dues(_scenario(OTEL, max_gap=None), 0)
    assert _rounded([d for d, _ in otel[""]]) == [0.0, 20.5, 29.5]
    assert _rounded([d for d, _ in otel["1"]]) == [4.8, 9.8]


def test_time_scale_multiplies_offsets_and_gaps() -> None:
    half = _dues(_scenario(max_gap="1s", time_scale=0.5), 0)
    assert _rounded([d for d, _ in half[""]]) == [0.0, 2.5, 9.5, 12.5, 15.0]
    assert _rounded([d for d, _ in half["2"]]) == [4.5, 6.25, 8.0]
    gaps = _dues(_scenario(max_gap="60s", timing="gaps", time_scale=0.5), 0)
    assert all(d is None for steps in gaps.values() for d, _ in steps)
    assert _rounded([w for _, w in gaps[""]]) == [1.0, 0.75, 2.0, 30.0, 0.0]


def test_timing_defaults_to_offsets_and_an_unknown_one_is_refused() -> None:
    assert _scenario().traffic.agent_trace is not None and _scenario().traffic.agent_trace.timing == "offsets"
    doc = {
        "name": "t",
        "variants": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}],
        "traffic": {"agent_trace": {"path": str(WEKA), "timing": "recorded"}},
        "load": {"users": 2, "duration": "5s"},
    }
    with pytest.raises(ConfigError) as exc:
        parse_scenario(yaml.safe_dump(doc), "s.yaml")
    assert "traffic.agent_trace.timing" in str(exc.value) and "offsets" in str(exc.value)


class _Task:
    """An agent task whose next step is due ``due_s`` after its first was sent."""

    def __init__(self, due_s: float | None) -> None:
        self.due_s = due_s


def _tally(sent: float) -> SessionTally:
    tally = SessionTally("0-0", "a", "agent-trace")
    tally.records.append(RequestRecord("r", "a", "agent-trace", sent=sent))
    return tally


def test_the_runner_waits_for_the_due_time_and_says_whether_the_client_held_the_step() -> None:
    origin = time.monotonic()
    tally = _tally(origin)
    due, waited = gevent.spawn(_on_clock, _Task(0.05), tally, origin).get()
    assert due == origin + 0.05 and time.monotonic() >= due and waited > 0.03
    # Its prerequisites ended after its due time: sent at once, and no slip of the client's.
    due, waited = _on_clock(_Task(0.0), tally, origin + 0.01)  # type: ignore[arg-type]
    assert due is None and waited == 0
    # Gaps (no clock), or the task's first step (no origin yet): nothing to wait for.
    assert _on_clock(_Task(None), tally, origin) == (None, 0.0)  # type: ignore[arg-type]
    assert _on_clock(_Task(1.0), SessionTally("0-0", "a", "m"), origin) == (None, 0.0)  # type: ignore[arg-type]


def test_the_slip_is_stated_over_the_window_sessions_steps() -> None:
    stats = SessionStats()
    for slips in ([0.001, 0.002], [0.004], []):
        tally = _tally(1.0)
        tally.records[0].done = 2.0
        tally.ended = 2.0
        tally.slips = list(slips)
        stats.add(tally, window_end=10.0, judged=False)
    merged = SessionStats()
    merged.merge_wire(stats.to_wire())
    fig = session_figures(merged, window_s=10.0)
    slip = fig["schedule_slip_ms"]
    assert slip["count"] == 3 and slip["max"] == pytest.approx(4.0, abs=0.01)
    assert slip["p50"] == pytest.approx(2.0, abs=0.01)
    assert "schedule_slip_ms" not in session_figures(SessionStats(), window_s=10.0)
    report = {"variants": [{"name": "a", "sessions": {"agent-trace": fig}}]}
    lines = session_lines(report)
    assert any(line.startswith("- a · agent-trace: p50 2") and "max 4" in line for line in lines), lines
