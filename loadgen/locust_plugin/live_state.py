"""What the master (or a local process) knows of the run now: the merged aggregate, the measured window and the
runner's facts, turned into the report (`current_report`, as the run's end writes it) or into the cheap live summary
(`live_summary`: the web UI's LLM tab, its charts page, the headless progress line; see live/summary.py for what it
keeps and why). Both read the same state, so the numbers after the stop are the report's.

Two things Locust keeps apart from the figures enter the run's facts here. What crashed in any process (the
master's own `CrashLog`, the workers' as they reported it) fails the run: `run.failed`, exit 4. The exceptions
Locust caught in users' tasks (`runner.exceptions`: the user went on, but its request did not run as the scenario
says) make it untrustworthy and are named: `run.user_exceptions`, and a reason.
"""

from __future__ import annotations

import time
from typing import Any

from locust.env import Environment
from locust.runners import STATE_MISSING, LocalRunner, MasterRunner

from loadgen.live.summary import live_summary as _summary
from loadgen.locust_plugin.cluster_queries import attach_cluster_metrics
from loadgen.locust_plugin.cost_queries import attach_cost_energy
from loadgen.locust_plugin.early_stop import stop_report
from loadgen.locust_plugin.live_metrics import attach_server_metrics
from loadgen.locust_plugin.request_stream import senders_per_variant
from loadgen.locust_plugin.runtime import runtime_of
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.collector import Collector
from loadgen.measure.health import HealthThresholds, verdict
from loadgen.report.build import build_report
from loadgen.report.request_timeline import timeline_section

__all__ = ["current_report", "live_state", "live_summary", "users_per_variant"]


def users_per_variant(environment: Environment) -> dict[str, int]:
    """Users of each variant now (a master counts what its workers reported)."""
    runner = environment.runner
    counts: dict[str, int] = {}
    if runner is None:
        return counts
    by_class = getattr(runner, "reported_user_classes_count", None) or runner.user_classes_count
    if not any(by_class.values()):  # stopped: what it had when it stopped
        by_class = getattr(runner, "final_user_classes_count", None) or by_class
    scenario = runtime_of(environment).scenario
    if scenario.load.arrival is not None:
        # One class of senders, spread evenly over the workers by Locust; each worker splits its own by weight.
        total = sum(int(by_class.get(cls.__name__, 0)) for cls in environment.user_classes)
        workers = max(1, int(getattr(runner, "worker_count", 1)))
        return senders_per_variant(scenario, [total // workers + (w < total % workers) for w in range(workers)])
    for cls in environment.user_classes:
        variant = getattr(cls, "variant", None)
        if variant is not None:
            counts[variant] = counts.get(variant, 0) + int(by_class.get(cls.__name__, 0))
    return counts


def live_state(environment: Environment, failed: list[str] | None = None) -> tuple[Aggregate, float, dict[str, Any]]:
    """(merged aggregate, measured window in s, the report's `run` facts), as `build_report` takes them. `failed`:
    why the run failed besides what crashed (e.g. it was stopped before its end)."""
    rt = runtime_of(environment)
    col = rt.collector
    assert col is not None
    scenario = rt.scenario
    runner = environment.runner
    if not isinstance(runner, MasterRunner):
        rt.drain()
    if isinstance(runner, LocalRunner) and not col.flushed and rt.started:
        # A single process has no reports in flight: read its own aggregate without consuming it. (Once its final
        # report is in, the collector has everything; the emptied runtime would overwrite its health.)
        snapshot = Collector(col.run)
        rt.collect_reads()
        snapshot.merge_report(
            "local",
            {"run": col.run, "agg": rt.aggregate.to_wire(), "health": rt.health.to_wire(), "window": None},
        )
        col_view = _combined(col, snapshot)
    else:
        col_view = col
    started = col.started_wall or time.time()
    stopped = col.stopped_wall or time.time()
    # The workers' own windows where they reported them (a local run's snapshot has none), else the master's clock.
    window = col.measured_window(scenario.load.warmup)
    if isinstance(runner, MasterRunner):
        label = {wid: f"worker-{runner.get_worker_index(wid)}" for wid in col.seen | set(col_view.health)}
        missing = {c.id for c in runner.clients.all if c.state == STATE_MISSING}
    else:
        label = {wid: wid for wid in col.seen | set(col_view.health)}
        missing = set()
    lost = col.lost_workers(missing)
    recovered = col.recover_lost(lost, label) if col.flushed else []
    workers = {label[wid]: h.summary() for wid, h in sorted(col_view.health.items())}
    reasons = verdict(workers, HealthThresholds(**scenario.run_trust.model_dump()))
    exceptions = _user_exceptions(runner, label)
    if exceptions:
        reasons.append(_exceptions_reason(exceptions))
    failures = [*(failed or []), *_crashes(rt.crashes.entries(), "master" if isinstance(runner, MasterRunner) else "")]
    for wid, entries in sorted(col.crashes.items()):
        failures += _crashes(entries, label.get(wid, wid))
    run = {
        "duration_s": round(stopped - started, 3),
        "warmup_s": scenario.load.warmup,
        "users": getattr(environment.parsed_options, "num_users", None),
        "users_per_variant": users_per_variant(environment),
        "workers": workers,
        "lost_workers": [label.get(w, w) for w in lost],
        "lost_in_flight": col.lost_in_flight(lost, label),
        "recovered": recovered,
        "untrustworthy_reasons": reasons,
        "run_number": col.run,
        # False while the run is live (the web UI's report): counts still grow, no worker has been asked to flush.
        "finished": col.flushed,
    }
    if exceptions:
        run["user_exceptions"] = exceptions
    running = col.sessions_in_flight() if isinstance(runner, MasterRunner) else dict(rt.tasks_running_by)
    if running:  # agent tasks under way now (the web UI's live figure; none once the drain is over)
        run["sessions_in_flight"] = [[v, m, n] for (v, m), n in sorted(running.items())]
    left = col.workers_left(label)
    if left:
        run["workers_left"] = left
    if isinstance(runner, MasterRunner):
        run["master"] = col.master_cost()
    stop_report(rt, run)  # stopped by `stop_when:`: why and when
    raw_lost = col.raw_losses(label)
    if raw_lost:
        run["raw_records_lost"] = raw_lost
    if failures:
        run["failed"] = failures
    mono = col.window_monotonic()
    if mono is not None:
        # The workers' own window on this host's monotonic clock (what a truth log can be cut at).
        run["window_monotonic"] = [round(mono[0], 6), round(mono[1], 6)]
    return col_view.aggregate, window, run


def current_report(environment: Environment, failed: list[str] | None = None) -> dict[str, Any]:
    """The full report of the run so far (the one the run's end writes, when the run is over), each variant's
    server-metrics timeline and the cluster Prometheus's figures so far included."""
    agg, window, run = live_state(environment, failed)
    rt = runtime_of(environment)
    report = build_report(rt.scenario, agg, window, run)
    col = rt.collector
    assert col is not None
    # Sampled requests as lanes; a local process's own sample until its final report moved it to the collector.
    sample = rt.request_timeline if isinstance(environment.runner, LocalRunner) and not col.flushed else None
    report["request_timeline"] = timeline_section(
        rt.scenario, sample or col.request_timeline, col.started_wall or time.time()
    )
    attach_server_metrics(environment, report)
    attach_cluster_metrics(environment, report)
    attach_cost_energy(environment, report)  # after the server metrics: the KV-cache use is read from them
    return report


def live_summary(environment: Environment) -> dict[str, Any]:
    """The live summary of the run so far: the report's figures for the live views, without the report's cost."""
    agg, window, run = live_state(environment)
    return _summary(runtime_of(environment).scenario, agg, window, run)


def _combined(a: Collector, b: Collector) -> Collector:
    out = Collector(a.run)
    out.aggregate.merge(a.aggregate)
    out.aggregate.merge(b.aggregate)
    out.health = {**a.health, **b.health}
    return out


def _user_exceptions(runner: Any, label: dict[str, str]) -> list[dict[str, Any]]:
    """Locust's `runner.exceptions` (what users' tasks raised, deduplicated by traceback), most frequent first."""
    rows = []
    for row in (getattr(runner, "exceptions", None) or {}).values():
        tb = [ln.strip() for ln in str(row.get("traceback", "")).strip().splitlines() if ln.strip()]
        files = [ln for ln in tb if ln.startswith("File ")]
        rows.append(
            {
                "message": str(row.get("msg", "")),
                "count": int(row.get("count", 0)),
                "nodes": sorted(label.get(n, n) for n in row.get("nodes", ())),
                "where": files[-1].replace("File ", "", 1) if files else "",
            }
        )
    return sorted(rows, key=lambda r: (-r["count"], r["message"]))


def _exceptions_reason(rows: list[dict[str, Any]]) -> str:
    total = sum(r["count"] for r in rows)
    named = "; ".join(f"{r['message'] or '(no message)'} ×{r['count']}" for r in rows[:3])
    more = f"; and {len(rows) - 3} more" if len(rows) > 3 else ""
    return (
        f"Locust users raised {total} exception{'s' if total != 1 else ''} ({named}{more}): those requests did not run "
        "as the scenario says (run.user_exceptions)"
    )


def _crashes(entries: list[dict[str, Any]], node: str) -> list[str]:
    out = []
    for e in entries:
        times = f" ×{e['count']}" if int(e.get("count", 1)) > 1 else ""
        where = f" ({e['where']})" if e.get("where") else ""
        out.append(f"{node + ': ' if node else ''}unhandled exception {e['what']}{times}{where}")
    return out
