"""A server that puts 4 tokens in every chunk and says so only in its final usage (no continuous_usage_stats),
against its ground-truth log (bench/server.py: 10 ms per token, so a chunk every 40 ms): the usage total spread
over the chunks gives per-token ITL of 10 ms (not 40: one token per chunk assumed) and TPOT within 1 % of the
truth (not 2.4 % low), on the C read path and the Python one alike."""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.client.reactor import Reactor
from loadgen.measure.records import RequestRecord, TokenSource
from loadgen.sim.truth import TruthRequest, load_truth

from .harness import serving_bench
from .streams import stream_chat

_K, _ITL_MS, _TOKENS = 4, 10.0, 128
_USERS, _PER_USER = 6, 2


@pytest.fixture(scope="module")
def bench_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, subprocess.Popen[bytes]]]:
    d = tmp_path_factory.mktemp("spread")
    truth = d / "truth.jsonl"
    args = ("--k", str(_K), "--itl-ms", str(_ITL_MS), "--force-output-tokens", str(_TOKENS), "--no-spin")
    with serving_bench(d, *args, "--truth", str(truth)) as (port, proc):
        yield f"http://127.0.0.1:{port}", truth, proc


def _stream_all(base_url: str, tag: str, reactor: Reactor) -> list[RequestRecord]:
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "word " * 20}],
        "max_tokens": _TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True},  # totals at the end only
    }
    return stream_chat(base_url, tag, reactor, users=_USERS, per_user=_PER_USER, body=body)


def _truth_tpot(tr: TruthRequest) -> float:
    return (tr.chunk_times[-1] - tr.chunk_times[0]) / (tr.output_tokens - tr.chunk_tokens[0])


@pytest.fixture(scope="module")
def runs(bench_server: tuple[str, Path, subprocess.Popen[bytes]]) -> dict[str, list[RequestRecord]]:
    url, _, _ = bench_server
    out: dict[str, list[RequestRecord]] = {}
    for path in ("c", "python"):
        if path == "python":
            os.environ["LOADGEN_PURE_PYTHON"] = "1"  # a reactor started with the C half switched off
        r = Reactor()
        try:
            assert r.fast is (path == "c")
            out[path] = _stream_all(url, path, r)
        finally:
            r.close()
            if path == "python":
                del os.environ["LOADGEN_PURE_PYTHON"]
    return out


@pytest.fixture(scope="module")
def truth(
    bench_server: tuple[str, Path, subprocess.Popen[bytes]], runs: dict[str, list[RequestRecord]]
) -> dict[str, TruthRequest]:
    _, path, proc = bench_server
    proc.send_signal(signal.SIGTERM)  # the server writes its truth log at exit
    proc.wait(10)
    return load_truth(path)


@pytest.mark.parametrize("path", ["c", "python"])
def test_usage_spread_gives_per_token_itl_and_tpot_of_the_truth(
    runs: dict[str, list[RequestRecord]], truth: dict[str, TruthRequest], path: str
) -> None:
    records = runs[path]
    assert len(records) == _USERS * _PER_USER
    itl_ms: list[float] = []
    tpot_err: list[float] = []
    one_per_chunk_err: list[float] = []
    for rec in records:
        tr = truth[rec.request_id]
        assert rec.error is None, rec.error_detail
        assert tr.chunk_tokens == [_K] * (_TOKENS // _K)
        assert rec.token_source == TokenSource.USAGE_SPREAD and rec.output_tokens == _TOKENS
        assert list(rec.chunk_tokens) == tr.chunk_tokens
        itl_ms += [gap * 1e3 for gap, k in rec.itl_samples() for _ in range(k)]
        assert rec.tpot is not None
        tpot_err.append(rec.tpot / _truth_tpot(tr) - 1)
        # What one token per chunk would have given: the span over (usage - 1).
        span = rec.chunk_times[-1] - rec.chunk_times[0]
        one_per_chunk_err.append(span / (_TOKENS - 1) / _truth_tpot(tr) - 1)
    med = statistics.median(itl_ms)
    worst = max(abs(e) for e in tpot_err)
    print(
        f"{path}: ITL per token median {med:.2f} ms (n={len(itl_ms)}), TPOT error max {worst * 100:.2f} %, "
        f"one-per-chunk TPOT error {statistics.mean(one_per_chunk_err) * 100:.2f} %"
    )
    assert 9.5 < med < 10.5
    assert worst < 0.01
    assert statistics.mean(one_per_chunk_err) < -0.02  # the bias the spread removes
