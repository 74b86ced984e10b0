"""A Locust master and 2 worker processes on loopback: merged counts and percentiles against the raw records."""

from __future__ import annotations

import pytest

from loadgen.measure.histogram import RELATIVE_ERROR
from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import hdr_rank_percentile, read_records, read_report, run_loadgen, write_scenario


@pytest.fixture(scope="module")
def distributed_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("distributed")
    truth_path = tmp / "truth.jsonl"
    with start_sim_process(["baseline", "int8"], truth_log=truth_path) as sim:
        scenario = write_scenario(
            tmp / "scenario.yaml",
            {"baseline": sim.base_url("baseline"), "int8": sim.base_url("int8")},
            load={"users": 20, "duration": "8s", "warmup": "2s"},
        )
        proc = run_loadgen(scenario, "--workers", "2", "--raw-records", str(tmp / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {
        "records": read_records(tmp / "raw"),
        "shards": sorted(p.name for p in (tmp / "raw").glob("records-*.jsonl")),
        "report": read_report(tmp / "report"),
        "truth": {v: load_truth(truth_path, variant=v) for v in ("baseline", "int8")},
    }


def test_both_workers_ran_and_nothing_was_lost(distributed_run: dict[str, object]) -> None:
    report = distributed_run["report"]
    assert len(distributed_run["shards"]) == 2  # type: ignore[arg-type]
    assert len(report["run"]["workers"]) == 2  # type: ignore[index]
    assert report["run"]["lost_workers"] == []  # type: ignore[index]
    assert report["run"]["trustworthy"] is True  # type: ignore[index]


def test_merged_request_count_equals_what_was_sent(distributed_run: dict[str, object]) -> None:
    report, records, truth = distributed_run["report"], distributed_run["records"], distributed_run["truth"]
    for v in report["variants"]:  # type: ignore[index]
        mine = [r for r in records if r["variant"] == v["name"]]  # type: ignore[attr-defined]
        o = v["overall"]
        assert o["requests"] + o["warmup_excluded"] + o["cut_by_stop"] == len(mine)
        assert o["cut_by_stop"] == sum(1 for r in mine if r["cut_by_stop"])
        # Every user had a request in flight at the stop: the drain let each finish, measured whole, none was cut.
        assert 0 < o["drained"] <= report["run"]["users_per_variant"][v["name"]]  # type: ignore[index]
        assert o["cut_by_stop"] == 0
        assert o["ok"] == sum(1 for r in mine if r["error"] is None and not r["warmup"] and not r["cut_by_stop"])
        # Every request the simulator completed was recorded by a worker, and vice versa.
        completed = {rid for rid, t in truth[v["name"]].items() if t.finish is not None and not t.aborted}  # type: ignore[index]
        recorded = {r["id"] for r in mine if r["error"] is None and not r["cut_by_stop"]}
        assert recorded <= completed
        # The simulator may finish a stream whose last bytes the stopped client no longer read.
        cut = {r["id"] for r in mine if r["cut_by_stop"]}
        assert completed - recorded <= cut, "every request the server completed is recorded (or was cut by the stop)"


def test_merged_percentiles_equal_raw_within_histogram_error(distributed_run: dict[str, object]) -> None:
    report, records = distributed_run["report"], distributed_run["records"]
    for v in report["variants"]:  # type: ignore[index]
        ok = [
            r
            for r in records  # type: ignore[attr-defined]
            if r["variant"] == v["name"] and r["error"] is None and not r["warmup"] and not r["cut_by_stop"]
        ]
        assert len(ok) >= 30
        for metric, values in (
            ("ttft", [r["ttft"] for r in ok]),
            ("e2e", [r["e2e"] for r in ok]),
            ("tpot", [r["tpot"] for r in ok if r["tpot"] is not None]),
        ):
            got = v["overall"]["metrics_ms"][metric]
            assert got["count"] == len(values)
            for name, p in (("p50", 50.0), ("p99", 99.0)):
                exact_ms = hdr_rank_percentile(values, p) * 1e3
                # HDR bucket edge (0.1 %) + microsecond rounding of each sample.
                assert got[name] == pytest.approx(exact_ms, rel=RELATIVE_ERROR, abs=0.002), (v["name"], metric, name)
