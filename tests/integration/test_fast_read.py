"""The C read path (protocol/_wire.c) in a real streaming run, and the Python path it stands in for: both read the
simulator's streams (one token per chunk, and several with spec-decode) into the same records, timed to its
ground-truth log; with the C half on, token chunks go straight into the records without Python parsing them."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest

from loadgen.client.reactor import Reactor
from loadgen.measure.records import RequestRecord
from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import TruthRequest, load_truth

from .streams import stream_chat

_USERS = 12
_PER_USER = 3


def _stream_all(base_url: str, tag: str, reactor: Reactor) -> list[RequestRecord]:
    """`_USERS` greenlets, each streaming `_PER_USER` chat requests on one keep-alive connection."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "word " * 40}],
        "max_tokens": 24,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    return stream_chat(base_url, tag, reactor, users=_USERS, per_user=_PER_USER, body=body)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, str], Path]:
    truth = tmp_path_factory.mktemp("fast-read") / "truth.jsonl"
    with start_sim_process(["baseline", "spec-decode"], truth_log=truth) as proc:
        yield {v: proc.base_url(v) for v in ("baseline", "spec-decode")}, truth  # type: ignore[misc]


def _check_against_truth(records: list[RequestRecord], truth: dict[str, TruthRequest]) -> int:
    errors_ms: list[float] = []
    for rec in records:
        assert rec.error is None, rec.error_detail
        tr = truth[rec.request_id]
        assert list(rec.chunk_tokens) == tr.chunk_tokens, rec.request_id
        assert rec.token_source == "server" and rec.output_tokens == sum(tr.chunk_tokens)
        errors_ms += [(a - b) * 1e3 for a, b in zip(rec.chunk_times, tr.chunk_times, strict=True)]
    # Kernel arrival stamp minus the simulator's write time, on loopback: microseconds, unless the simulator was
    # descheduled between stamping and writing (a shared CI core). A wrong path is off by a chunk gap (>= 10 ms).
    errors_ms.sort()
    assert errors_ms[0] > -0.05, errors_ms[0]  # never before the write
    assert errors_ms[len(errors_ms) // 2] < 0.5 and errors_ms[int(0.99 * len(errors_ms))] < 2.0, errors_ms[-10:]
    return len(errors_ms)


@pytest.mark.parametrize("variant", ["baseline", "spec-decode"])
@pytest.mark.parametrize("path", ["c", "python"])
def test_streams_are_read_into_the_truths_records(
    sim: tuple[dict[str, str], Path], variant: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls, truth_path = sim
    if path == "python":
        # A reactor started with the C half switched off (as on a host without it).
        monkeypatch.setenv("LOADGEN_PURE_PYTHON", "1")
    r = Reactor()
    try:
        assert r.fast is (path == "c")
        records = _stream_all(urls[variant], f"{path}-{variant}", r)
        taken = r.pop_reads_in_c()  # what the worker's health reports as "reads taken in C"
    except BaseException:
        # Closing a reactor with streams still reading raises: keep the failure that left them reading.
        with contextlib.suppress(RuntimeError):
            r.close()
        raise
    r.close()
    assert len(records) == _USERS * _PER_USER
    time.sleep(1.5)  # the simulator flushes its truth log every second
    chunks = _check_against_truth(records, load_truth(truth_path, variant=variant))
    if path == "c":
        # Python parsed each response's head and end; the token reads in between were the C half's.
        assert taken >= 0.8 * chunks, (taken, chunks)
    else:
        assert taken == 0
