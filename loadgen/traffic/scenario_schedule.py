"""A scenario's open-loop schedule: `load.arrival` as traffic/arrivals.py draws it, or for `kind: trace` the times of
`traffic.trace`'s rows (read once per process by traffic/trace_file.py). The worker's dispatcher, the report's
requested rate and `stop_when`'s planned arrivals all take the schedule from here, so they agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadgen.traffic.arrivals import ArrivalSchedule, schedule_for
from loadgen.traffic.trace_file import trace_of

if TYPE_CHECKING:
    from loadgen.config.scenario import Scenario
    from loadgen.config.trace import TraceReplay

__all__ = ["requested_in_window", "schedule_of", "trace_summary"]


def schedule_of(scenario: Scenario) -> ArrivalSchedule | None:
    """The open-loop schedule of ``scenario``; None in closed loop."""
    arrival = scenario.load.arrival
    if arrival is None:
        return None
    if arrival.kind != "trace":
        return schedule_for(arrival)
    replay = scenario.traffic.trace
    assert replay is not None  # the model refuses kind trace without traffic.trace
    trace = trace_of(replay)
    span = trace.span_s if trace.span_s > 0 else 1.0  # one row, or all at one instant: a rate of n per second
    return ArrivalSchedule("trace", len(trace.rows) / span, offsets=trace.offsets)


def requested_in_window(schedule: ArrivalSchedule, start: float, end: float) -> float:
    """A trace's requested rate over the measured window (start, end] seconds of the run: its rows there per
    second (what the other kinds' `rate` or stages state)."""
    assert schedule.offsets is not None
    # A row at 0 is sent at the run's start: in a window that opens there (no warm-up).
    n = sum(1 for t in schedule.offsets if (start < t or t == start == 0) and t <= end)
    return round(n / (end - start), 4) if end > start else 0.0


def trace_summary(replay: TraceReplay) -> dict[str, object]:
    """What the report says of a replayed trace: its format, the window replayed and what it held."""
    trace = trace_of(replay)
    rows = trace.rows
    return {
        "format": trace.format,
        "rows_in_file": trace.rows_in_file,
        "rows_in_window": len(rows),
        "failed_left_out": trace.failed_left_out,
        "start_s": replay.start,
        "duration_s": replay.duration,
        "time_scale": replay.time_scale,
        "span_s": round(trace.span_s, 6),
        "input_tokens": sum(r.input_tokens for r in rows),
        "output_tokens": sum(r.output_tokens for r in rows),
    }
