"""Recording a finished request: the C call (loadgen/measure/_record.c) and its Python equal
(`recording.record_values_python`: `LatencyHistogram.record` and `record_chunk_gaps`) leave identical histograms —
counts, window, total, min and max — on every case either accepts, and `fates.latencies` equals `fates.latency`
metric by metric for every fate and record shape."""

from __future__ import annotations

import itertools
import math
import random
from array import array
from typing import Any

import pytest

from loadgen.measure import recording
from loadgen.measure.chunk_gaps import record_chunk_gaps
from loadgen.measure.fates import FATES, RECORDED_METRICS, latencies, latency
from loadgen.measure.hdr_layout import HIGHEST_US
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.records import RequestRecord, TokenSource

native: Any = pytest.importorskip("loadgen.measure._record")


def state(h: LatencyHistogram) -> tuple[Any, ...]:
    counts = None if h._counts is None else bytes(memoryview(h._counts))
    return h._off, counts, h._total, h._min, h._max


def states(hists: dict[str, LatencyHistogram]) -> list[tuple[str, tuple[Any, ...]]]:
    return [(m, state(h)) for m, h in hists.items()]  # (the order the histograms were made in, too)


def _stream(rng: random.Random, n: int, max_k: int, odd: bool) -> tuple[array[float], array[int]]:
    times, tokens = array("d"), array("l")
    t = rng.uniform(0, 100)
    for i in range(n):
        if i:
            gaps = [rng.uniform(0, 0.002), rng.lognormvariate(-4, 1.5)]
            if odd:  # beyond the lookup table, below zero, beyond the layout's highest value
                gaps += [-1e-6, -3.0, 0.07, 5000.0, 1e7, -1e300, 1e300]
            t += rng.choice(gaps)
        times.append(t)
        tokens.append(rng.choice([1] * 6 + list(range(-1, max_k + 1))) if max_k > 1 else 1)
    return times, tokens


CASES = [(n, k, odd) for n in (0, 1, 2, 3, 8, 64, 300) for k in (1, 4) for odd in (False, True)]


@pytest.mark.parametrize(("n", "max_k", "odd"), CASES)
def test_c_chunk_gaps_equal_python(n: int, max_k: int, odd: bool) -> None:
    rng = random.Random(n * 31 + max_k * 7 + odd)
    c_itl, c_icl, p_itl, p_icl = (LatencyHistogram() for _ in range(4))
    for _ in range(40):  # one pair of histograms over many streams: the window grows, then is reused
        times, tokens = _stream(rng, n, max_k, odd)
        native.gaps(c_itl, c_icl, times, tokens)
        record_chunk_gaps(p_itl, p_icl, times, tokens)
        assert state(c_itl) == state(p_itl)
        assert state(c_icl) == state(p_icl)
    assert c_itl.encode() == p_itl.encode() and c_icl.encode() == p_icl.encode()


def test_c_chunk_gaps_of_every_slot_edge() -> None:
    """Gaps at each bucket's edges (every power of two around the sub-bucket size), 0 and the layout's top."""
    edges = sorted(
        {0, 1, HIGHEST_US - 1, HIGHEST_US, HIGHEST_US + 5} | {(1 << b) + d for b in range(40) for d in (-1, 0, 1)}
    )
    for k in (1, 3):
        times = array("d", [0.0])
        tokens = array("l", [1])
        for us in edges:
            times.append(times[-1] + us / 1e6)
            tokens.append(k)
        c = LatencyHistogram(), LatencyHistogram()
        p = LatencyHistogram(), LatencyHistogram()
        native.gaps(*c, times, tokens)
        record_chunk_gaps(*p, times, tokens)
        assert [state(h) for h in c] == [state(h) for h in p]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_value_python_refuses_is_refused_alike_and_adds_nothing(bad: float) -> None:
    c = LatencyHistogram(), LatencyHistogram()
    p = LatencyHistogram(), LatencyHistogram()
    times, tokens = array("d", [0.0, 0.01, bad, 0.03]), array("l", [1, 2, 1, 1])
    with pytest.raises(Exception) as c_err:
        native.gaps(*c, times, tokens)
    with pytest.raises(Exception) as p_err:
        record_chunk_gaps(*p, times, tokens)
    assert type(c_err.value) is type(p_err.value)
    assert [state(h) for h in c] == [state(h) for h in p]
    ch: dict[str, LatencyHistogram] = {}
    ph: dict[str, LatencyHistogram] = {}
    for hists, fn in ((ch, native.record), (ph, recording.record_values_python)):
        with pytest.raises(type(p_err.value)):
            fn(hists, _maker(hists), ("a", "b", "c"), (0.5, bad, 0.7), None, ())
    assert states(ch) == states(ph)


def _maker(hists: dict[str, LatencyHistogram]) -> Any:
    def make(name: str) -> LatencyHistogram:
        h = hists[name] = LatencyHistogram()
        return h

    return make


def test_c_record_values_equal_python() -> None:
    rng = random.Random(5)
    names = ("connect", "ttft", "e2e", "tpot", "x")
    ch: dict[str, LatencyHistogram] = {}
    ph: dict[str, LatencyHistogram] = {}
    specials = [0.0, -0.0, -1e-9, -5.0, 4e-7, 5e-7, 6e-7, 3600.0, 3600.0001, 1e7, 1e200, -1e200, 2, 7]
    for j in range(3000):
        values = tuple(
            None if rng.random() < 0.3 else rng.choice([*specials, rng.lognormvariate(-3, 3), rng.uniform(0, 0.01)])
            for _ in names
        )
        times, tokens = _stream(rng, rng.choice([0, 1, 2, 9]), 3, j % 4 == 0)
        t = None if j % 3 == 0 else times
        native.record(ch, _maker(ch), names, values, t, tokens)
        recording.record_values_python(ph, _maker(ph), names, values, t, tokens)
        if j < 100 or j % 100 == 0:
            assert states(ch) == states(ph)
    assert states(ch) == states(ph)


def test_what_c_does_not_write_in_place_goes_to_python_unchanged() -> None:
    """Another layout (2 digits: its values), chunk times as lists, one histogram as both ITL and ICL: recorded by
    Python."""
    other_c, other_p = LatencyHistogram(digits=2, highest_s=60.0), LatencyHistogram(digits=2, highest_s=60.0)
    for v in (0.25, 70.0, 1e-5):
        native.record({"v": other_c}, _maker({}), ("v",), (v,))
        other_p.record(v)
    assert state(other_c) == state(other_p)
    c = LatencyHistogram(), LatencyHistogram()
    p = LatencyHistogram(), LatencyHistogram()
    for times, tokens in (([0.0, 0.01, 0.03], [1, 2, 1]), (array("d", [0.0, 70.0]), [1, 1])):
        native.gaps(*c, times, tokens)
        record_chunk_gaps(*p, times, tokens)
    assert [state(h) for h in c] == [state(h) for h in p]
    same_c, same_p = LatencyHistogram(), LatencyHistogram()
    native.gaps(same_c, same_c, array("d", [0.0, 0.01, 0.03]), array("l", [1, 2, 1]))
    record_chunk_gaps(same_p, same_p, array("d", [0.0, 0.01, 0.03]), array("l", [1, 2, 1]))
    assert state(same_c) == state(same_p)


def _records() -> list[RequestRecord]:
    out = []
    for streamed, scheduled, chunks, done, fate, src in itertools.product(
        (True, False), (None, 99.5), (0, 1, 3), (None, 101.25), FATES, (TokenSource.SERVER, TokenSource.ONE_PER_CHUNK)
    ):
        rec = RequestRecord("w-v-0-1", "v", "m", sent=100.0, scheduled=scheduled, done=done, streamed=streamed)
        rec.token_source = src
        for i in range(chunks):
            rec.chunk_times.append(100.5 + i * 0.01)
            rec.chunk_tokens.append(1 + i % 2)
        rec.fate = fate.value
        out.append(rec)
    return out


def test_latencies_equal_latency_for_every_fate_and_shape() -> None:
    for rec in _records():
        row = FATES[rec.fate]  # type: ignore[index]
        plan, values = latencies(rec, row)
        for i, metric in enumerate(RECORDED_METRICS):
            value, censored = latency(rec, metric, row)
            assert (values[i], metric in plan.censored) == (value, censored), (rec, metric)
            assert plan.measured[i] or value is None
