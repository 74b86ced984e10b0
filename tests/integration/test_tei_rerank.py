"""TEI's own `/rerank` (`dialect: tei-rerank`) end to end on loopback: against the simulator, which answers
`{query, texts}` as text-embeddings-inference does; and against a server that ranks fewer texts than it was sent,
whose every request fails as `malformed` — counted and classified, the workers unharmed."""

from __future__ import annotations

import socket
from pathlib import Path

import orjson

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import read_records, read_report, run_loadgen, write_scenario
from .misbehaving import RawServer

_DOCS = {
    "mixes": [{"name": "docs"}],
    "custom_mixes": {"docs": {"buckets": [{"name": "b", "prompt_tokens": [200, 400]}], "output_tokens": [1, 1]}},
}


def _tei(base_url: str) -> dict[str, object]:
    return {"base_url": base_url, "dialect": "tei-rerank", "items_per_request": 4, "continuous_usage_stats": False}


def test_tei_rerank_against_the_simulator(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    with start_sim_process(["tei=baseline"], truth_log=truth_path) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"tei": _tei(sim.base_url("tei"))},
            traffic=_DOCS,
            load={"users": 4, "spawn_rate": 100, "duration": "3s", "warmup": 0},
            slos=[{"metric": "success_rate", "min_percent": 100}],
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    v = read_report(tmp_path / "report")["variants"][0]
    records = [r for r in read_records(tmp_path / "raw") if not r["cut_by_stop"]]
    truth = load_truth(truth_path, variant="tei")
    assert v["streamed"] is False and v["pooling"]["kind"] == "rerank" and v["pooling"]["items_per_request"] == 4
    assert v["overall"]["requests"] == v["overall"]["ok"] == len(records) > 10
    for r in records:
        t = truth[r["id"]]
        # TEI's reply carries no usage: no input tokens are read from it.
        assert r["error"] is None and r["prompt_tokens"] is None and r["chunk_times"] == []
        assert t.arrival is not None and t.finish is not None and r["e2e"] >= t.finish - t.arrival


def _ranks_two(conn: socket.socket) -> bool:
    """TEI's shape, but two ranks whatever the texts sent."""
    body = orjson.dumps([{"index": 1, "score": 0.9}, {"index": 0, "score": 0.1}])
    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    conn.sendall(head + body)
    return True


def test_a_reply_that_ranks_fewer_texts_than_sent_fails_as_malformed(tmp_path: Path) -> None:
    server = RawServer(_ranks_two)
    try:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"tei": _tei(server.base_url)},
            traffic=_DOCS,
            load={"users": 2, "spawn_rate": 100, "duration": "2s", "warmup": 0},
            slos=[{"metric": "success_rate", "min_percent": 100}],
            # A target that fails at once keeps the client's loop busy: this test judges the classification, so the
            # generator's own trust limits are loose (its CPU at 100 %, 101 % seen, would otherwise make it exit 3).
            run_trust={"loop_lag_p99_ms": 500, "cpu_percent_p90": 400, "schedule_slip_p99_ms": 500},
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
    finally:
        server.close()
    report = read_report(tmp_path / "report")
    o = report["variants"][0]["overall"]
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the target breached; the load generator is fine
    assert o["ok"] == 0 and o["errors"] == {"malformed": o["requests"]} and o["requests"] > 10
    assert not report["run"].get("failed") and not report["run"].get("user_exceptions")
    assert report["run"]["trustworthy"]
    rows = [r for r in read_records(tmp_path / "raw") if not r["cut_by_stop"]]
    assert rows and all("2 ranks for the 4 sent" in r["error_detail"] for r in rows)
