"""A run's merged aggregate on disk, and one report from several runs of one scenario.

Every finished run writes `aggregate.json` beside report.json: the master's merged `Aggregate` in its wire form
(the exact histograms, not their percentiles), so a report can be rebuilt or combined without the raw records.

`combine_phases` builds the report of a sequential scenario (`load.sequential`): each variant ran on its own, one
after another, as a run of its own with the same seed (so the same requests); their aggregates merge into one
report of the whole scenario, where every variant's rates use its own measured window, the SLOs are evaluated and
the variants compared as for a concurrent run, and the run facts list each phase.
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadgen.config.scenario import Scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.hist_blob import is_raw
from loadgen.report.build import build_report
from loadgen.report.cluster_metrics_report import join_cluster_sections
from loadgen.report.server_split import latency_split

__all__ = ["AGGREGATE_FILE", "Phase", "combine_phases", "phase_dir", "read_aggregate", "write_aggregate"]

AGGREGATE_FILE = "aggregate.json"


def _text(value: object) -> str:
    # The wire's histograms are raw V2 payloads (measure/histogram.py `wire`) and its packed sample rows raw int64
    # in a bytearray (measure/hash_sample.py `pack`): both written as base64 text, which their readers take back
    # (`merge_encoded_into`, `words`); a histogram already in base64 (`encode()`) as it is; the rest is JSON.
    if isinstance(value, bytearray) or is_raw(value):
        return binascii.b2a_base64(value, newline=False).decode("ascii")
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("ascii")
    raise TypeError(f"not JSON-serialisable: {type(value).__name__}")


def write_aggregate(agg: Aggregate, out_dir: Path) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / AGGREGATE_FILE
    path.write_bytes(orjson.dumps(agg.to_wire(), default=_text))
    return path


def read_aggregate(path: Path) -> Aggregate:
    """The aggregate `write_aggregate` wrote; ValueError when the file is of another wire version."""
    agg = Aggregate()
    agg.merge_wire(orjson.loads(path.read_bytes()))
    return agg


def phase_dir(report_dir: Path, index: int, variant: str) -> Path:
    """Where phase `index` (from 0: variant `variant` alone) of a sequential run writes its report."""
    return report_dir / "phases" / f"{index + 1}-{variant}"


@dataclass(frozen=True, slots=True)
class Phase:
    """One variant's run of a sequential scenario: its report (report.json) and its aggregate."""

    variant: str
    report: dict[str, Any]
    aggregate: Aggregate
    report_dir: str
    exit_code: int


def combine_phases(scenario: Scenario, phases: list[Phase], pause_s: float) -> tuple[dict[str, Any], Aggregate]:
    """The report of `scenario` from its variants' phases (in the order they ran), and their merged aggregate."""
    agg = Aggregate()
    windows: dict[str, float] = {}
    workers: dict[str, Any] = {}
    reasons: list[str] = []
    failed: list[str] = []
    lost: list[str] = []
    lost_in_flight: dict[str, int] = {}
    left: dict[str, float] = {}
    recovered: list[Any] = []
    for p in phases:
        agg.merge(p.aggregate)
        run = p.report["run"]
        windows[p.variant] = float(run["window_s"])
        workers |= {f"{p.variant}/{w}": h for w, h in run.get("workers", {}).items()}
        # Each phase's reasons name its variant.
        reasons += [f"{p.variant}: {r}" for r in run.get("untrustworthy_reasons", [])]
        failed += [f"{p.variant}: {r}" for r in run.get("failed", [])]  # a phase that failed fails the run
        lost += [f"{p.variant}/{w}" for w in run.get("lost_workers", [])]
        lost_in_flight |= {f"{p.variant}/{w}": n for w, n in (run.get("lost_in_flight") or {}).items()}
        left |= {f"{p.variant}/{w}": at for w, at in (run.get("workers_left") or {}).items()}
        recovered += run.get("recovered", [])
    run_facts = {
        "sequential": True,
        "pause_s": pause_s,
        "phases": [
            {
                "variant": p.variant,
                "window_s": p.report["run"]["window_s"],
                "duration_s": p.report["run"].get("duration_s"),
                "users": p.report["run"].get("users"),
                "exit_code": p.exit_code,
                "report_dir": p.report_dir,
            }
            for p in phases
        ],
        "duration_s": round(sum(float(p.report["run"].get("duration_s") or 0.0) for p in phases), 3),
        "warmup_s": scenario.load.warmup,
        "users": scenario.load.users,
        "users_per_variant": {p.variant: p.report["run"].get("users") for p in phases},
        "workers": workers,
        "lost_workers": lost,
        "lost_in_flight": lost_in_flight,
        "recovered": recovered,
        "untrustworthy_reasons": reasons,
        "run_number": 1,
        "finished": all(p.report["run"].get("finished", True) for p in phases),
    }
    if failed:
        run_facts["failed"] = failed
    if left:  # seconds into its own phase
        run_facts["workers_left"] = left
    stops = [p.report["run"]["stopped_early"] for p in phases if p.report["run"].get("stopped_early")]
    if stops:  # a phase `stop_when:` ended: the combined run is no pass either (its reasons carry the verdict)
        run_facts["stopped_early"] = stops[0]
    report = build_report(scenario, agg, max(windows.values(), default=0.0), run_facts, windows=windows)
    # What each phase's master read beside its aggregate: its variant's own /metrics, the cluster Prometheus.
    own = {p.variant: v for p in phases for v in p.report.get("variants", []) if v.get("name") == p.variant}
    for v in report["variants"]:
        sm = own.get(v["name"], {}).get("server_metrics")
        if sm is not None:
            v["server_metrics"] = sm
            split = latency_split(v)  # its TTFT split by its server's histograms, over its own window
            if split is not None:
                v["latency_split"] = split
        # Its power, GPU memory and KV-cache use, read over its own window (the one its cost is over here too).
        read = own.get(v["name"], {}).get("cost_energy") or {}
        if v.get("cost_energy") is not None:
            v["cost_energy"] |= {k: read[k] for k in ("energy", "gpu_memory", "kv") if k in read}
    lanes = [
        v
        for p in phases
        for v in (p.report.get("request_timeline") or {}).get("variants", [])
        if v["name"] == p.variant
    ]
    if lanes:  # each variant's sampled requests, on its own phase's clock
        method = next(p.report["request_timeline"]["method"] for p in phases if p.report.get("request_timeline"))
        report["request_timeline"] = {
            "method": {**method, "clock": "each variant's own phase: seconds from its start"},
            "variants": lanes,
        }
    cluster = join_cluster_sections([p.report.get("cluster_metrics") or {} for p in phases])
    if cluster is not None:
        report["cluster_metrics"] = cluster
    return report, agg
