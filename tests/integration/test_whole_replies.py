"""Whole replies (`variants[].stream: false`) against the simulator's truth: one simulated server, asked for the same
seeded requests streamed (`streamed`, the baseline) and whole (`whole`).

What is held, with the tolerances stated: each whole reply's output tokens equal the truth log's for the request
(exact), its end (`done`, the kernel's arrival stamp of the reply's last read) lies 0–50 ms after the simulator's
write of it (same monotonic clock; loopback reads within a ms, two busy cores allow more), and its E2E is the
truth's (finish − arrival) plus 0–50 ms (the client's write precedes the server's parse); the report has E2E and no
TTFT / ITL / TPOT for `whole`, compares the pair on E2E only, and judges the default TTFT SLO on `streamed` only.
Both read paths (the C half on, and LOADGEN_PURE_PYTHON=1) read the same whole replies into the same records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from loadgen.measure.records import RequestRecord
from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import read_records, read_report, run_loadgen, write_scenario

_ROOT = Path(__file__).resolve().parents[2]
_MS = 1e-3


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("whole")
    truth_path = tmp / "truth.jsonl"
    with start_sim_process(["base=baseline"], truth_log=truth_path) as sim:
        url = sim.base_url("base")
        scenario = write_scenario(
            tmp / "scenario.yaml",
            {"streamed": url, "whole": {"base_url": url, "stream": False, "continuous_usage_stats": False}},
            load={"users": 4, "duration": "5s", "warmup": "1s"},
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp / "raw"))
        paths = {p: _read_whole(url, p, pure_python=p == "python") for p in ("c", "python")}
        time.sleep(1.5)  # the simulator flushes its truth log every second
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return {
        "report": read_report(tmp / "report"),
        "records": read_records(tmp / "raw"),
        "truth": load_truth(truth_path, variant="base"),
        "paths": paths,
    }


def _whole(run: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in run["records"] if r["variant"] == "whole" and not r["warmup"] and not r["cut_by_stop"]]


def test_each_whole_reply_is_the_truths_tokens_and_end(whole_run: dict[str, Any]) -> None:
    truth = whole_run["truth"]
    rows = _whole(whole_run)
    assert len(rows) >= 10 and all(r["error"] is None for r in rows), [r["error_detail"] for r in rows][:3]
    late, e2e_over = [], []
    for r in rows:
        t = truth[r["id"]]
        assert r["streamed"] is False and r["chunk_times"] == [] and r["ttft"] is None and r["tpot"] is None
        assert len(t.chunk_times) == 1 and r["output_tokens"] == t.output_tokens == r["max_tokens"], r["id"]
        assert r["token_source"] == "usage" and t.finish is not None and t.arrival is not None
        late.append(r["done"] - t.finish)
        e2e_over.append(r["e2e"] - (t.finish - t.arrival))
    print(f"reply read {min(late) / _MS:.2f}–{max(late) / _MS:.2f} ms after its write; E2E over the truth's "
          f"{min(e2e_over) / _MS:.2f}–{max(e2e_over) / _MS:.2f} ms")  # fmt: skip
    assert all(-0.05 * _MS <= d <= 50 * _MS for d in late), (min(late), max(late))
    assert all(0 <= d <= 50 * _MS for d in e2e_over), (min(e2e_over), max(e2e_over))


def test_the_report_has_e2e_only_for_whole_replies(whole_run: dict[str, Any]) -> None:
    report = whole_run["report"]
    streamed, whole = (next(v for v in report["variants"] if v["name"] == n) for n in ("streamed", "whole"))
    assert streamed["streamed"] is True and whole["streamed"] is False
    assert set(whole["overall"]["metrics_ms"]) == {"e2e"}
    assert {"ttft", "itl", "tpot", "e2e"} <= set(streamed["overall"]["metrics_ms"])
    ok = [r for r in _whole(whole_run) if r["error"] is None]
    assert whole["overall"]["token_count_source"] == {"usage": whole["overall"]["ok"]}
    assert whole["overall"]["ok"] <= len(ok) and whole["overall"]["ok_without_tokens"] == 0
    entries = [e for e in report["comparison"] if e["variant"] == "whole"]
    assert {e["metric"] for e in entries} == {"e2e"} and len(entries) == 2
    # Same server, same requests, same lengths: the whole reply ends when the stream would have (a step's write).
    p50 = next(e for e in entries if e["stat"] == "p50")
    print("E2E p50 speedup of whole over streamed", p50["speedup"], p50["ci_low"], p50["ci_high"])
    assert 0.8 <= p50["speedup"] <= 1.25
    judged = {(s["variant"], s["metric"]) for s in report["slos"]}
    assert ("streamed", "ttft") in judged and ("whole", "ttft") not in judged and ("whole", "e2e") in judged


# Whole replies in a fresh interpreter through loadgen's client, with the C half on or off (LOADGEN_PURE_PYTHON).
_READ = r"""
import json, sys
import gevent
import orjson
from loadgen.client.connection import Endpoint, StreamConnection
from loadgen.client.reactor import Reactor
from loadgen.measure.records import RequestRecord
from loadgen.protocol.dialects import dialect_for
from loadgen.protocol.whole_reply import WholeReplyAccumulator

base_url, tag = sys.argv[1], sys.argv[2]
dialect = dialect_for("openai-chat", None, stream=False)
body = {"model": "m", "messages": [{"role": "user", "content": "word " * 40}], "max_tokens": 24, "stream": False}
payload, r, records = orjson.dumps(body), Reactor(), []

def user(u):
    conn = StreamConnection(Endpoint(base_url), 5.0, 10.0, reactor=r)
    head = conn.head_bytes(dialect.path_for("m"), {"Content-Type": "application/json"})
    for j in range(3):
        rid = f"{tag}-{u}-{j}"
        acc = WholeReplyAccumulator(RequestRecord(rid, "v", "m"), dialect)
        assert conn.post_stream(head, b"X-Request-Id: %s\r\n" % rid.encode(), payload, acc)[1] == 200
        records.append(acc.finish(conn.last_rx))
    conn.close()

gevent.joinall([gevent.spawn(user, u) for u in range(4)], raise_error=True, timeout=60)
print(json.dumps({"fast": r.fast, "records": [rec.to_json() for rec in records]}))
r.close()
"""


def _read_whole(base_url: str, path: str, pure_python: bool) -> tuple[bool, list[RequestRecord]]:
    env = {k: v for k, v in os.environ.items() if k != "LOADGEN_PURE_PYTHON"}
    if pure_python:
        env["LOADGEN_PURE_PYTHON"] = "1"
    proc = subprocess.run(
        [sys.executable, "-c", _READ, base_url, f"path-{path}"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=_ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out["fast"], [RequestRecord.from_json(row) for row in out["records"]]


def test_both_read_paths_read_whole_replies_alike(whole_run: dict[str, Any]) -> None:
    truth = whole_run["truth"]
    seen = {}
    for path, (fast, records) in whole_run["paths"].items():
        assert fast is (path == "c")
        assert len(records) == 12
        for rec in records:
            t = truth[rec.request_id]
            assert rec.error is None and not rec.chunk_times and rec.output_tokens == t.output_tokens == 24
            assert rec.done is not None and t.finish is not None and -0.05 * _MS <= rec.done - t.finish <= 50 * _MS
            seen.setdefault(path, set()).add((rec.output_tokens, rec.prompt_tokens, rec.finish_reason))
    assert seen["c"] == seen["python"] and len(seen["c"]) == 1
