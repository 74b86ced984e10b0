"""A raw record shard whose writes fail (ENOSPC from /dev/full, a real full disk's error) stops without raising:
the error is logged once naming the worker and the folder, and every row not in the shard is counted as lost."""

from __future__ import annotations

import logging
import os
from array import array
from pathlib import Path

import orjson
import pytest

from loadgen.locust_plugin.raw_records import RawRecordWriter
from loadgen.measure.records import RequestRecord


def _rec(i: int) -> RequestRecord:
    rec = RequestRecord(f"r1-w0-1-a-{i}", "a", "chat", sent=100.0 + i, done=100.5 + i, status=200)
    rec.chunk_times, rec.chunk_tokens = array("d", [100.1 + i, 100.2 + i]), array("l", [1, 1])
    return rec


def test_rows_are_written_whole_and_counted(tmp_path: Path) -> None:
    w = RawRecordWriter(tmp_path / "raw", "r1-w0-1", "worker-0")
    for i in range(300):  # one batch of 256 flushed by write, the rest by close
        w.write(_rec(i))
    w.close()
    rows = [orjson.loads(line) for line in w.path.read_bytes().splitlines()]
    assert [r["id"] for r in rows] == [f"r1-w0-1-a-{i}" for i in range(300)]
    assert (w.rows, w.lost, w.error) == (300, 0, None)
    assert w.status() == {"path": str(w.path.resolve())}


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux) to answer ENOSPC")
def test_a_write_that_fails_stops_the_shard_logs_once_and_counts_every_row_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "records-r1-w0-1.jsonl").symlink_to("/dev/full")  # every write: ENOSPC, "No space left on device"
    w = RawRecordWriter(raw, "r1-w0-1", "worker-0 (pid 1)")
    with caplog.at_level(logging.ERROR, logger="loadgen"):
        for i in range(300):
            w.write(_rec(i))  # the 256th write flushes, fails, and must not raise
        w.flush()
        w.close()
    assert w.rows == 300 and w.lost == 300
    assert w.error is not None and "No space left on device" in w.error
    (logged,) = [r.getMessage() for r in caplog.records]
    assert "worker-0 (pid 1)" in logged and str(raw) in logged and "No space left" in logged
    status = w.status()
    assert status["lost"] == 300 and status["folder"] == str(raw.resolve()) and "No space left" in status["error"]


def test_a_folder_that_cannot_be_made_loses_every_row_without_raising(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    w = RawRecordWriter(blocker / "raw", "r1-w0-1", "worker-0")
    for i in range(3):
        w.write(_rec(i))
    w.close()
    assert (w.rows, w.lost) == (3, 3) and w.error is not None and "Errno" in w.error
