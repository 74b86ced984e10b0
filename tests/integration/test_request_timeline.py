"""The request timeline against ground truth: one run on the simulator (a master and a worker, raw shards kept),
then the report's sampled requests are checked against the shards' records — which requests (the seeded bottom-k
of every window request of the variant), and each one's TTFT, E2E, tokens, chunks and slow gaps — and its CSV and
HTML lanes against the report."""

from __future__ import annotations

import csv
import io
import subprocess
import sys
from pathlib import Path

import orjson

from loadgen.measure.pairs import pair_hash, pair_key
from loadgen.measure.records import RequestRecord
from loadgen.measure.request_timeline import TIMELINE_CAP
from loadgen.report.request_timeline import CSV_COLUMNS
from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, run_loadgen, write_scenario

_BOUND_MS = 12.0  # the ITL SLO the gaps are judged against: the simulator's decode steps straddle it


def test_the_sampled_requests_are_the_seeded_bottom_k_with_their_true_course(tmp_path: Path) -> None:
    with start_sim_process(["a=baseline", "b=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"a": sim.base_url("a"), "b": sim.base_url("b")},
            load={"users": 24, "duration": "6s", "warmup": "1s"},
            traffic={
                "mixes": [{"name": "short", "weight": 1}],
                "custom_mixes": {
                    "short": {
                        "buckets": [{"name": "s", "prompt_tokens": [20, 60], "weight": 1}],
                        "output_tokens": [8, 24],
                    }
                },
            },
            slos=[{"metric": "itl", "stat": "p99", "max_ms": _BOUND_MS}],
        )
        proc = run_loadgen(scenario, "--workers", "1", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    records = [RequestRecord.from_json(r) for r in read_records(tmp_path / "raw")]
    section = report["request_timeline"]
    assert section["method"]["cap_per_variant"] == TIMELINE_CAP
    total = 0
    for v in section["variants"]:
        mine = {pair_key(r) or r.request_id: r for r in records if r.variant == v["name"] and not r.warmup}
        assert len(mine) > TIMELINE_CAP, "the run must hold more requests than the sample keeps"
        expected = sorted(mine, key=lambda k: pair_hash(f"{report['seed']}:{k}"))[:TIMELINE_CAP]
        rows = {r["key"]: r for r in v["requests"]}
        assert sorted(rows) == sorted(expected), v["name"]
        assert v["itl_bound_ms"] == _BOUND_MS
        first = min(v["requests"], key=lambda r: r["sent"])
        for key, row in rows.items():
            rec = mine[key]
            assert row["outcome"] == ("cut_by_stop" if rec.cut_by_stop else rec.error or "ok")
            assert row["tokens"] == sum(rec.chunk_tokens) and row["chunks"] == len(rec.chunk_times)
            # Each time is rounded to the µs twice (as a wall time of ~1.8e9 s, whose float steps are 0.24 µs, then
            # from the run's start), so a difference of two is exact within 2 µs and a little (a CI run: 2.04 µs).
            if rec.ttft is not None:
                assert abs(row["first_token"] - row["sent"] - rec.ttft) < 3e-6
            if rec.done is not None:
                assert abs(row["done"] - row["sent"] - (rec.done - rec.sent)) < 3e-6
            # One clock for all: the sends' spacing is the records' (wall vs monotonic: within a millisecond).
            assert abs((row["sent"] - first["sent"]) - (rec.sent - mine[first["key"]].sent)) < 1e-3
            t, n = rec.chunk_times, rec.chunk_tokens
            slow = [(t[i] - t[i - 1]) * 1e3 for i in range(1, len(t)) if (t[i] - t[i - 1]) * 1e3 / n[i] > _BOUND_MS]
            assert row["slow_gaps"] == len(slow)
            assert sorted(round(g[1], 3) for g in row["gaps"]) == sorted(round(g, 3) for g in slow)[-20:]
        total += len(rows)
    assert any(r["slow_gaps"] for v in section["variants"] for r in v["requests"]), "no gap over the bound to see"
    out = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "report", str(tmp_path / "report"), "--format", "timeline-csv",
         "--exit-zero"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    table = list(csv.DictReader(io.StringIO(out.stdout)))
    assert tuple(table[0]) == CSV_COLUMNS and len(table) == total
    by_key = {(r["variant"], r["key"]): r for r in table}
    for v in section["variants"]:
        for row in v["requests"]:
            got = by_key[(v["name"], row["key"])]
            assert int(got["slow_gaps"]) == row["slow_gaps"] and got["outcome"] == row["outcome"]
    # Rebuilt from the shards: the same requests, the same course (its clock starts at the first measured send).
    rebuilt = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "report", str(tmp_path / "raw"), "--scenario", str(scenario),
         "--format", "json", "--exit-zero"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    rebuilt_section = orjson.loads(rebuilt.stdout)["request_timeline"]
    again = {v["name"]: {r["key"]: r for r in v["requests"]} for v in rebuilt_section["variants"]}
    for v in section["variants"]:
        assert sorted(again[v["name"]]) == sorted(r["key"] for r in v["requests"])
        for r in v["requests"]:
            twin = again[v["name"]][r["key"]]
            assert (twin["slow_gaps"], twin["gaps"], twin["tokens"], twin["outcome"]) == (
                r["slow_gaps"],
                r["gaps"],
                r["tokens"],
                r["outcome"],
            )
    page = (tmp_path / "report" / "report.html").read_text()
    assert page.count('<svg class=request-timeline data-variant="') == 2
    assert page.count("<g class=lane>") == total
