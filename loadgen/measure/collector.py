"""The master's side of a run: what every worker reported, merged, and who is missing.

Pure (no Locust): the plugin feeds it reports and asks it for the merged aggregate. A worker's report belongs to one
run (the web UI can run several in one process life); a late one from an earlier run is dropped, never mixed in.
A worker is lost only when Locust marked it missing or, once the final flush was asked, it never answered; what it
finished after the last aggregate it shipped is recovered from its raw shard when the master can read it, and named
as missing otherwise. (With many workers a report carries the aggregate only every few intervals, health every
time: `Runtime.report_since_last`.) What crashed in a worker (unhandled exceptions: a failed run) is kept per worker.
"""

from __future__ import annotations

import resource
import time
from pathlib import Path
from typing import Any

import orjson

from loadgen.measure.aggregate import Aggregate
from loadgen.measure.health import HealthStats
from loadgen.measure.records import RequestRecord
from loadgen.measure.request_timeline import RequestTimelineSample

__all__ = ["FLUSH_TIMEOUT_S", "Collector"]

# Locust's workers report every 3 s: the master's merge cost is summed over intervals of this length.
_INTERVAL_S = 3.0
#: How long the master waits for the workers' last deltas at the end of a run (then a silent one is lost).
FLUSH_TIMEOUT_S = 15.0


class Collector:
    def __init__(self, run: int = 0) -> None:
        self.run = run
        self.aggregate = Aggregate()
        self.health: dict[str, HealthStats] = {}
        self.seen: set[str] = set()
        self.final: set[str] = set()
        # Workers whose final report came before the stop (a worker stopped mid-run hands over, then quits): when.
        self.left_wall: dict[str, float] = {}
        self.started_wall: float | None = None
        self.stopped_wall: float | None = None
        self.reported = False
        # The final flush was asked and is over: from then on a worker that did not answer is lost.
        self.flushed = False
        self.raw_position: dict[str, dict[str, Any]] = {}
        self.windows: dict[str, list[float | None]] = {}
        self.last_report_wall: dict[str, float] = {}
        self.requests_reported: dict[str, int] = {}
        self.in_flight: dict[str, int] = {}  # each worker's requests in flight at its last report
        self.tasks_running: dict[str, dict[tuple[str, str], int]] = {}  # each worker's agent tasks under way
        self.recovered: dict[str, str] = {}
        self.crashes: dict[str, list[dict[str, Any]]] = {}
        # `stop_when:` (measure/early_stop.StopJudge): fed each worker's stop counts; None without rules.
        self.stop_judge: Any = None
        # Every worker's sampled requests, for the report's request timeline (measure/request_timeline.py).
        self.request_timeline = RequestTimelineSample()
        # The master's own cost: seconds spent merging reports, summed per report interval (one entry an interval).
        self.merge_s: dict[int, float] = {}
        self.reports_merged = 0

    def merge_report(self, worker_id: str, data: dict[str, Any], final: bool = False) -> bool:
        """Merge one report; False (and nothing merged) when it belongs to another run."""
        if int(data.get("run", self.run)) != self.run:
            return False
        t0 = time.perf_counter()
        self._merge(worker_id, data, final)
        done = time.perf_counter()
        interval = int(time.time() // _INTERVAL_S)
        self.merge_s[interval] = self.merge_s.get(interval, 0.0) + (done - t0)
        self.reports_merged += 1
        return True

    def master_cost(self) -> dict[str, Any]:
        """What merging the workers' reports cost this process: per report interval (3 s) the median and the
        largest total, all of it, and the process's peak resident memory."""
        per = sorted(self.merge_s.values())
        return {
            "reports_merged": self.reports_merged,
            "merge_ms_per_interval_p50": round(1e3 * per[len(per) // 2], 3) if per else None,
            "merge_ms_per_interval_max": round(1e3 * per[-1], 3) if per else None,
            "merge_ms_total": round(1e3 * sum(per), 3),
            # ru_maxrss is in KiB on Linux.
            "rss_peak_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }

    def _merge(self, worker_id: str, data: dict[str, Any], final: bool) -> None:
        self.seen.add(worker_id)
        agg = data.get("agg")
        if agg is not None:
            self.aggregate.merge_wire(agg)
            self.last_report_wall[worker_id] = time.time()
            done = sum(int(g.get("requests", 0)) + int(g.get("warmup_excluded", 0)) for _, _, g in agg["groups"])
            self.requests_reported[worker_id] = self.requests_reported.get(worker_id, 0) + done
        health = self.health.get(worker_id)
        if health is None:  # not setdefault(): a HealthStats holds a loop-lag histogram, built only once per worker
            health = self.health[worker_id] = HealthStats()
        health.merge_wire(data["health"])
        if data.get("raw"):
            self.raw_position[worker_id] = data["raw"]
        if data.get("window"):
            self.windows[worker_id] = list(data["window"])
        if "in_flight" in data:
            self.in_flight[worker_id] = int(data["in_flight"])
        if "tasks_running" in data:
            self.tasks_running[worker_id] = {(v, m): int(n) for v, m, n in data["tasks_running"]}
        if data.get("request_timeline"):
            self.request_timeline.merge_wire(data["request_timeline"])
        if data.get("stop") and self.stop_judge is not None:
            self.stop_judge.merge(worker_id, data["stop"])
        for crash in data.get("crashes") or ():
            self._add_crash(worker_id, crash)
        if final:
            if self.stopped_wall is None and worker_id not in self.final:
                self.left_wall[worker_id] = time.time()
            self.final.add(worker_id)

    def _add_crash(self, worker_id: str, crash: dict[str, Any]) -> None:
        kept = self.crashes.setdefault(worker_id, [])
        for entry in kept:
            if entry["what"] == crash.get("what") and entry["where"] == crash.get("where"):
                entry["count"] += int(crash.get("count", 1))
                return
        kept.append(
            {"what": str(crash.get("what")), "where": str(crash.get("where", "")), "count": int(crash.get("count", 1))}
        )

    def lost_workers(self, missing: set[str] | frozenset[str] = frozenset()) -> list[str]:
        """Workers Locust marks missing, and (after the final flush) those that never answered it."""
        lost = self.seen & set(missing)
        if self.flushed:
            lost |= self.seen - self.final
        return sorted(lost)

    def workers_left(self, label: dict[str, str]) -> dict[str, float]:
        """Per worker that left before the stop, how many seconds into the run it left: its figures up to then are
        whole (it handed them over), and Locust gave its users to the workers still running."""
        start = self.started_wall
        return {
            label.get(w, w): round(max(0.0, t - start) if start is not None else 0.0, 1)
            for w, t in sorted(self.left_wall.items())
        }

    def sessions_in_flight(self) -> dict[tuple[str, str], int]:
        """Agent tasks under way by (variant, mix): the workers' latest reports, summed (a worker that has sent its
        final report has none)."""
        out: dict[tuple[str, str], int] = {}
        for worker, running in self.tasks_running.items():
            if worker in self.left_wall:
                continue
            for key, n in running.items():
                out[key] = out.get(key, 0) + n
        return out

    def lost_in_flight(self, lost: list[str], label: dict[str, str]) -> dict[str, int]:
        """Per lost worker, the requests it had in flight at its last report: sent, never finished where the master
        can see (the worker died with them), so in no figure of the report: named by count instead."""
        return {label.get(w, w): self.in_flight.get(w, 0) for w in lost}

    def measured_window(self, warmup: float) -> float:
        """The measured window so far (s): the workers' own (warm-up end → stop, each on its own clock) where they
        reported them, else this process's wall clock from the start (to the stop, or now) less the warm-up."""
        spans = [
            max(0.0, b - a)  # (stopped early, before the warm-up's end: no window)
            for a, b in (w[:2] for w in self.windows.values() if len(w) > 1)
            if a is not None and b is not None
        ]
        if spans:
            return max(spans)
        started = self.started_wall or time.time()
        stopped = self.stopped_wall or time.time()
        return max(0.0, stopped - started - warmup)

    def window_monotonic(self) -> list[float] | None:
        """[earliest warm-up end, latest stop] over the workers (one host's monotonic clock)."""
        starts = [w[0] for w in self.windows.values() if w and w[0] is not None]
        ends = [w[1] for w in self.windows.values() if len(w) > 1 and w[1] is not None]
        if not starts or not ends:
            return None
        return [min(starts), max(ends)]

    def raw_losses(self, label: dict[str, str]) -> list[dict[str, Any]]:
        """The workers whose raw shard stopped (a write failed: a full disk): who, how many rows it is missing, why
        and where. Their histograms and counters are whole; only the raw rows are missing."""
        return [
            {"worker": label.get(wid, wid), "rows": int(pos["lost"]), "error": str(pos.get("error", "")),
             "folder": str(pos.get("folder", ""))}
            for wid, pos in sorted(self.raw_position.items())
            if pos.get("error")
        ]  # fmt: skip

    def recover_lost(self, lost: list[str], label: dict[str, str]) -> list[str]:
        """For each lost worker: merge the shard rows its shipped aggregates did not cover, or say what is missing."""
        notes = []
        for wid in lost:
            if wid not in self.recovered:
                self.recovered[wid] = self._recover(wid, label.get(wid, wid))
            notes.append(self.recovered[wid])
        return notes

    def _recover(self, wid: str, name: str) -> str:
        pos = self.raw_position.get(wid)
        since = self.last_report_wall.get(wid)
        ago = f"{max(0.0, (self.stopped_wall or time.time()) - since):.1f} s" if since else "an unknown time"
        if pos is None:
            return (
                f"{name}: no raw shard; what it finished in the last {ago} before the stop (after the last aggregate "
                f"it shipped) is missing — it had reported {self.requests_reported.get(wid, 0)} requests"
            )
        window = self.windows.get(wid) or [None]
        start = window[0] if window[0] is not None else float("-inf")
        agg = Aggregate(window_start=start)
        added = 0
        try:
            with Path(pos["path"]).open("rb") as fh:
                for i, line in enumerate(fh):
                    if i < int(pos["rows"]) or not line.endswith(b"\n"):
                        continue  # covered by a report already / a row cut by the kill
                    agg.add(RequestRecord.from_json(orjson.loads(line)), time.time())
                    added += 1
        except (OSError, ValueError, KeyError) as e:
            return f"{name}: its raw shard {pos['path']} could not be read ({e}); its last {ago} is missing"
        self.aggregate.merge(agg)
        return (
            f"{name}: {added} requests it finished after its last report were recovered from its raw shard; "
            "only its in-flight requests are missing"
        )
