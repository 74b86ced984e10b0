"""Whole runs against misbehaving servers: each failure counted and classified as what it was, no worker lost or
crashed, the worker's memory bounded (its peak RSS, /proc VmHWM, is printed for the record).

- refuses connections for 5 s mid-run (a restart: open connections reset), then accepts again;
- stalls its response head (read_timeout shorter than the stall: a timeout; a 3 s stall stands in for 30 s, as the
  read timeout fires at 0.5 s however long the stall would have lasted);
- answers 10 MB on one line (over the 1 MiB event bound: malformed, the connection closed, the rest never read);
- sends 1,000 header fields (a head under 64 KiB is read; one over it is malformed).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import psutil

from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, write_scenario
from .misbehaving import RawServer, RefusingProxy, huge_line, many_headers

_MIB = 1 << 20


def _run(scenario: Path, raw: Path, timeout: float = 90) -> tuple[subprocess.CompletedProcess[str], int]:
    """`loadgen run --workers 1`, and its worker's peak RSS in bytes (VmHWM, read until the worker exits)."""
    cmd = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--quiet", "--workers", "1"]
    proc = subprocess.Popen(
        [*cmd, "--raw-records", str(raw)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peak, deadline = 0, time.monotonic() + timeout
    worker: psutil.Process | None = None
    while proc.poll() is None and time.monotonic() < deadline:
        if worker is None:
            found = [c for c in psutil.Process(proc.pid).children() if "--worker" in c.cmdline()]
            worker = found[0] if found else None
        if worker is not None:
            try:
                status = Path(f"/proc/{worker.pid}/status").read_text()
                peak = max(peak, int(status.split("VmHWM:")[1].split()[0]) * 1024)
            except (OSError, IndexError):
                pass
        time.sleep(0.05)
    out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), peak


def _classes(rows: list[dict[str, Any]], variant: str | None = None) -> Counter[str]:
    return Counter(
        r["error"] or "ok"
        for r in rows
        if not r["cut_by_stop"] and not r["warmup"] and (variant is None or r["variant"] == variant)
    )


def _check_report(tmp_path: Path, proc: subprocess.CompletedProcess[str], rows: list[dict[str, Any]]) -> dict:
    """No crash (no exit 4), no worker lost, and every variant's error counts are its raw records'."""
    assert proc.returncode in (0, 1, 3), proc.stdout[-2000:] + proc.stderr[-3000:]
    report = read_report(tmp_path / "report")
    assert report["run"]["lost_workers"] == [] and "failed" not in report["run"], report["run"]
    for v in report["variants"]:
        errors = {k: n for k, n in _classes(rows, v["name"]).items() if k != "ok"}
        assert v["overall"]["errors"] == errors, (v["name"], v["overall"]["errors"], errors)
    return report


def test_a_server_that_refuses_connections_for_5_s_then_accepts_again(tmp_path: Path) -> None:
    with start_sim_process(["baseline"]) as sim:
        proxy = RefusingProxy(int(sim.base_url("baseline").rsplit(":", 1)[1]))
        scenario = write_scenario(
            tmp_path / "s.yaml", {"baseline": proxy.base_url}, load={"users": 8, "duration": "11s"}
        )
        raw = tmp_path / "raw"

        def refuse_soon() -> None:
            deadline = time.monotonic() + 40
            while not any(p.stat().st_size > 0 for p in raw.glob("records-*.jsonl")):
                if time.monotonic() > deadline:
                    return
                time.sleep(0.1)
            time.sleep(1.0)
            proxy.refuse(5.0)

        t = threading.Thread(target=refuse_soon, daemon=True)
        t.start()
        proc, peak = _run(scenario, raw)
        t.join(timeout=10)
        proxy.close()
    assert proxy.refused_between is not None, "the proxy never refused: the run sent nothing"
    rows = read_records(raw)
    _check_report(tmp_path, proc, rows)
    start, end = proxy.refused_between
    seen = _classes(rows)
    assert seen["connect"] > 0 and set(seen) <= {"ok", "connect", "stream_interrupted"}, seen
    refused = [r for r in rows if r["error"] == "connect"]
    assert all("connect to 127.0.0.1" in r["error_detail"] for r in refused), refused[0]["error_detail"]
    # Connection errors only while it refused; successes before it and again after it.
    assert all(start - 0.5 <= r["sent"] <= end + 0.5 for r in refused)
    assert any(r["error"] is None and r["sent"] < start for r in rows)
    assert any(r["error"] is None and r["sent"] > end for r in rows)
    print(f"refusing 5 s: worker peak RSS {peak / _MIB:.1f} MiB, classes {dict(seen)}")


def test_a_server_that_stalls_its_response_head_is_a_timeout(tmp_path: Path) -> None:
    with start_sim_process(["stalls=int8"], faults={"stalls": {"slow_headers_s": 3.0}}) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"stalls": {"base_url": sim.base_url("stalls"), "read_timeout": "0.5s"}},
            load={"users": 4, "duration": "4s"},
        )
        proc, peak = _run(scenario, tmp_path / "raw")
    rows = read_records(tmp_path / "raw")
    _check_report(tmp_path, proc, rows)
    seen = _classes(rows)
    assert set(seen) == {"timeout"} and seen["timeout"] >= 4, seen
    assert all(r["error_detail"] == "no bytes for 0.5s" and r["status"] == 0 for r in rows if r["error"])
    print(f"stalled head: worker peak RSS {peak / _MIB:.1f} MiB, classes {dict(seen)}")


def test_a_server_that_answers_10_mb_on_one_line(tmp_path: Path) -> None:
    sent: list[int] = []
    server = RawServer(huge_line(10 * _MIB, sent))
    try:
        scenario = write_scenario(tmp_path / "s.yaml", {"huge": server.base_url}, load={"users": 4, "duration": "4s"})
        proc, peak = _run(scenario, tmp_path / "raw")
    finally:
        server.close()
    rows = read_records(tmp_path / "raw")
    _check_report(tmp_path, proc, rows)
    seen = _classes(rows)
    assert set(seen) == {"malformed"} and seen["malformed"] >= 4, seen
    failed = [r for r in rows if r["error"]]
    assert all("over 1 MiB" in r["error_detail"] and r["chunk_tokens"] == [1] for r in failed)
    # Each stream failed once it held 1 MiB of the line (one read more at most): the rest was never kept.
    held = [int(re.search(r"\((\d+) bytes so far\)", r["error_detail"])[1]) for r in failed]  # type: ignore[index]
    assert all(_MIB < n <= _MIB + 65536 for n in held), held
    print(
        f"10 MB line: worker peak RSS {peak / _MIB:.1f} MiB, {len(sent)} answers, bytes sent before the close "
        f"{min(sent)}-{max(sent)}"
    )
    assert peak < 400 * _MIB


def test_a_server_that_sends_1000_header_fields(tmp_path: Path) -> None:
    short, long = RawServer(many_headers(1000, 20)), RawServer(many_headers(1000, 100))
    try:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"fields": short.base_url, "long_fields": long.base_url},
            load={"users": 4, "duration": "4s"},
        )
        proc, peak = _run(scenario, tmp_path / "raw")
    finally:
        short.close()
        long.close()
    rows = read_records(tmp_path / "raw")
    _check_report(tmp_path, proc, rows)
    # 1,000 fields in 38 KB: read, and the stream after it whole.
    ok = _classes(rows, "fields")
    assert set(ok) == {"ok"} and ok["ok"] > 10, ok
    # 1,000 fields in 118 KB: over the 64 KiB head bound.
    bad = _classes(rows, "long_fields")
    assert set(bad) == {"malformed"} and bad["malformed"] >= 2, bad
    detail = {r["error_detail"] for r in rows if r["error"]}
    assert all(d.startswith("HTTP parse error: response head over 64 KiB") for d in detail), detail
    print(f"1,000 header fields: worker peak RSS {peak / _MIB:.1f} MiB, fields {dict(ok)}, long {dict(bad)}")
    assert peak < 160 * _MIB
