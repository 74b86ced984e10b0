"""The exporter's histogram walk: the C one (`_hist_walk.c`) equals the numpy one on every input either accepts —
random histograms, bounds and ranks at and past every edge — and refuses what it cannot walk; the exporter's text
is byte-identical with the C walk on and off."""

from __future__ import annotations

import random

import numpy as np
import pytest

from loadgen.config.live_metrics import DEFAULT_BUCKETS_S
from loadgen.live.exporter import LiveView, MetricsText
from loadgen.measure import _hist_walk
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.hist_walk import Scratch, native_available, walk_numpy

SLOTS = 4096


def test_the_c_walk_is_built() -> None:
    # CI and the image build it (a compiler is there); without it the numpy walk runs, slower.
    assert native_available()


def _case(rng: random.Random) -> tuple[np.ndarray, int, int, np.ndarray, np.ndarray, list[int]]:
    counts = np.zeros(SLOTS, dtype=np.int64)
    lo = rng.randrange(SLOTS)
    hi = min(SLOTS - 1, lo + rng.choice([0, 1, 2, 17, 300, SLOTS]))
    for _ in range(rng.choice([1, 3, 50, 2000])):
        counts[rng.randint(lo, hi)] += rng.choice([1, 1, 2, 10**9])
    counts[lo] += 1  # the slots of the lowest and highest recorded value hold a count
    counts[hi] += 1
    # Bounds anywhere: below lo, at lo, inside, at hi and hi + 1, past the end; repeated ones too.
    ends = sorted(rng.choice([0, lo, lo + 1, hi, hi + 1, SLOTS, rng.randrange(SLOTS + 1)]) for _ in range(18))
    median = np.array([rng.randrange(10**6) for _ in range(SLOTS)], dtype=np.int64)
    recorded = int(counts[lo : hi + 1].sum())
    ranks = sorted(max(1, int(q * (recorded + rng.choice([0, 0, 5])) + 0.5)) for q in (0.5, 0.9, 0.99, 0.999, 1.0))
    return counts, lo, hi, np.array(ends, dtype=np.int64), median, ranks


@pytest.mark.parametrize("seed", range(40))
def test_c_and_numpy_agree(seed: int) -> None:
    counts, lo, hi, ends, median, ranks = _case(random.Random(seed))
    expected = walk_numpy(counts, lo, hi, ends, median, ranks, Scratch(SLOTS))
    assert _hist_walk.walk(counts, lo, hi, ends, median, ranks) == expected
    buckets, recorded, total, slots = expected
    assert recorded == int(counts[lo : hi + 1].sum())
    assert total == int((counts[lo : hi + 1] * median[lo : hi + 1]).sum())
    assert buckets == [int(counts[lo : max(lo, min(e, hi + 1))].sum()) for e in ends]
    for r, s in zip(ranks, slots, strict=True):
        if r > recorded:
            assert s == -1  # among the censored
        else:
            assert counts[lo : s + 1].sum() >= r > counts[lo:s].sum()


def test_no_bounds_and_no_ranks() -> None:
    counts = np.zeros(8, dtype=np.int64)
    counts[2:5] = [1, 0, 3]
    empty = np.zeros(0, dtype=np.int64)
    median = np.arange(8, dtype=np.int64)
    assert _hist_walk.walk(counts, 2, 4, empty, median, []) == ([], 4, 2 + 12, [])
    assert walk_numpy(counts, 2, 4, empty, median, [], Scratch(8)) == ([], 4, 14, [])


@pytest.mark.parametrize(
    "lo, hi, ends, median_len, ranks, message",
    [
        (3, 2, [1], 8, [1], "outside"),
        (0, 8, [1], 8, [1], "outside"),
        (-1, 2, [1], 8, [1], "outside"),
        (0, 7, [1], 4, [1], "fewer median"),
        (0, 7, [3, 1], 8, [1], "ends must be ascending"),
        (0, 7, [1], 8, [2, 1], "ranks must be ascending"),
        (0, 7, [1], 8, [0], ">= 1"),
    ],
)
def test_the_c_walk_refuses_what_it_cannot_walk(
    lo: int, hi: int, ends: list[int], median_len: int, ranks: list[int], message: str
) -> None:
    counts = np.ones(8, dtype=np.int64)
    with pytest.raises(ValueError, match=message):
        _hist_walk.walk(counts, lo, hi, np.array(ends, dtype=np.int64), np.zeros(median_len, np.int64), ranks)
    with pytest.raises(ValueError, match="8-byte integers"):
        _hist_walk.walk(b"123", 0, 0, np.array(ends, dtype=np.int64), np.zeros(8, np.int64), [1])
    with pytest.raises(TypeError):
        _hist_walk.walk(counts, 0, 7, np.array(ends, dtype=np.int64), np.zeros(8, np.int64), [1.5])


def test_the_exporters_text_is_the_same_with_the_c_walk_on_and_off(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    agg = Aggregate()
    for v in range(2):
        for m in range(2):
            g = agg.group(f"v{v}", f"m{m}")
            g.requests = g.ok = 300
            for _ in range(300):
                g._hist("ttft").record(rng.lognormvariate(-2.0, 0.8))
                g._hist("e2e").record(rng.lognormvariate(1.0, 0.6))
            g.censored["ttft"] = 7 * v  # ranks past the recorded ones: +Inf quantiles
    view = LiveView(agg, {}, "s", 1)
    native = MetricsText(lambda: view, DEFAULT_BUCKETS_S).render()
    monkeypatch.setenv("LOADGEN_PURE_PYTHON", "1")
    assert not native_available()
    assert MetricsText(lambda: view, DEFAULT_BUCKETS_S).render() == native
    assert b'quantile="0.999"} +Inf' in native
