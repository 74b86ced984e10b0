"""A report rebuilt from raw shards and the scenario they were run with, for when the report itself is lost or was
never written (a run killed before its end).

The rows hold every request's timestamps, so the latency figures are exactly a live report's. What the rows cannot
hold is said in `run.rebuilt_from_records`: the window is the span of the measured requests' sends (first send to
last completion), not the workers' own; open-loop arrivals that were never sent (dropped, unsent at the stop) left
no row; load-generator health was never written to the shards, so trust rests on the requests alone.
"""

from __future__ import annotations

from typing import Any

from loadgen.config.scenario import Scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.goodput import goodput_misses
from loadgen.measure.records import RequestRecord
from loadgen.measure.request_timeline import RequestTimelineSample, itl_bound_ms
from loadgen.report.build import build_report
from loadgen.report.request_timeline import timeline_section

__all__ = ["report_from_records"]


def report_from_records(scenario: Scenario, rows: list[dict[str, Any]]) -> dict[str, Any]:
    records = [RequestRecord.from_json(row) for row in rows]
    measured = [r for r in records if not r.warmup and not r.cut_by_stop]
    start = min((r.sent for r in measured), default=0.0)
    end = max((r.done or r.sent for r in measured), default=start)
    agg = Aggregate(window_start=start)
    bounds = scenario.goodput.bounds() if scenario.goodput is not None else {}
    for rec in records:
        if bounds:
            rec.goodput_misses = goodput_misses(rec, bounds)
        # Monotonic seconds stand in for the wall clock of the timeline: the rows carry no other.
        agg.add(rec, rec.done or rec.sent)
        if rec.scheduled is not None:  # as the live recorder counts them: a row is an arrival that was sent
            counts = agg.group(rec.variant, rec.mix).arrivals
            key = "in_warmup" if rec.warmup else "sent"
            counts[key] = counts.get(key, 0) + 1
    run = {
        "rebuilt_from_records": {
            "rows": len(rows),
            "window": "first measured send to last measured completion",
            "not_in_records": ["open-loop arrivals dropped or unsent at the stop", "load-generator health"],
        },
        "warmup_s": scenario.load.warmup,
        "workers": {},
        "untrustworthy_reasons": [],
        "finished": True,
    }
    report = build_report(scenario, agg, max(end - start, 0.0), run)
    # The request timeline from the same rows, the same seeded sample the workers keep; its clock starts at the
    # first measured send (the rows carry monotonic seconds only).
    sample = RequestTimelineSample(
        scenario.seed, bounds={v.name: itl_bound_ms(scenario, v.name) for v in scenario.variants}
    )
    for rec in records:
        sample.add(rec, 0.0)
    report["request_timeline"] = timeline_section(scenario, sample, start)
    return report
