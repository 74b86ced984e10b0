from __future__ import annotations

import random
import subprocess
import sys

import pytest

from loadgen.measure.hist_merge import merge_encoded_into
from loadgen.measure.histogram import RELATIVE_ERROR, LatencyHistogram


def _exact_percentile(values: list[float], p: float) -> float:
    s = sorted(values)
    # hdrhistogram's rank: round(p % of N), at least 1.
    k = max(1, int(p * len(s) / 100 + 0.5))
    return s[k - 1]


def test_percentiles_within_stated_relative_error() -> None:
    rng = random.Random(1)
    values = [rng.lognormvariate(-3, 1.2) for _ in range(20_000)]  # ~50 ms median, long tail
    h = LatencyHistogram()
    for v in values:
        h.record(v)
    assert h.count == len(values)
    for p in (50, 90, 99, 99.9):
        exact = _exact_percentile(values, p)
        # 1 µs integer rounding + HDR bucket width.
        assert abs(h.percentile(p) - exact) <= exact * RELATIVE_ERROR * 1.01 + 1e-6, p
    assert abs(h.mean() - sum(values) / len(values)) <= 0.001 * h.mean()


def test_merge_of_encoded_parts_equals_one_histogram() -> None:
    rng = random.Random(2)
    whole, merged = LatencyHistogram(), LatencyHistogram()
    for _ in range(5):
        part = LatencyHistogram()
        for _ in range(1000):
            v = rng.uniform(0.001, 2.0)
            part.record(v)
            whole.record(v)
        merge_encoded_into(part.encode(), (merged,))
    assert merged.count == whole.count == 5000
    for p in (50, 99, 99.9):
        assert merged.percentile(p) == whole.percentile(p)
    assert merged.max() == whole.max()


def test_weighted_record_and_clamping() -> None:
    h = LatencyHistogram()
    h.record(0.010, count=4)
    h.record(-1.0)  # clock oddity: clamped to 0, never raises
    h.record(10_000.0)  # beyond 1 h: clamped to the top
    assert h.count == 6
    assert abs(h.percentile(50) - 0.010) <= 0.010 * RELATIVE_ERROR
    assert h.min() == 0.0
    s = h.summary_ms()
    assert s["count"] == 6 and abs(s["p50"] - 10.0) < 0.02
    assert LatencyHistogram().summary_ms() == {"count": 0}


@pytest.mark.parametrize("max_k", [1, 5])  # 1: the all-single-token path (table lookup, Counter)
def test_fast_chunk_gap_recording_equals_record(max_k: int) -> None:
    from loadgen.measure.histogram import record_chunk_gaps

    rng = random.Random(3)
    itl, icl = LatencyHistogram(), LatencyHistogram()
    ref_itl, ref_icl = LatencyHistogram(), LatencyHistogram()
    for j in range(300):
        times, tokens = [rng.uniform(0, 1)], [rng.randint(1, 4)]
        # some streams with a gap beyond the lookup table or below zero, most without
        odd = j % 5 == 0
        for _ in range(rng.randint(0, 40)):
            gaps = [rng.uniform(0, 0.002), rng.lognormvariate(-4, 1.5)] + ([-1e-6, 0.07, 5000.0] if odd else [])
            times.append(times[-1] + rng.choice(gaps))
            tokens.append(rng.randint(1, max_k))
        record_chunk_gaps(itl, icl, times, tokens)
        for i in range(1, len(times)):
            gap = times[i] - times[i - 1]
            ref_icl.record(gap)
            ref_itl.record(gap / tokens[i], tokens[i])
    for h, ref in ((itl, ref_itl), (icl, ref_icl)):
        assert h.count == ref.count
        assert list(h.to_hdrh().counts) == list(ref.to_hdrh().counts)
        assert (h.min(), h.max()) == (ref.min(), ref.max())


def test_fast_merge_equals_hdrh_decode_and_add() -> None:
    from hdrh.histogram import HdrHistogram

    rng = random.Random(4)
    fast, ref = LatencyHistogram(), HdrHistogram(1, 3_600_000_000, 3)
    for _ in range(30):
        part = LatencyHistogram()
        for _ in range(rng.randint(0, 300)):
            part.record(rng.lognormvariate(-3, 2))
        blob = part.encode()
        merge_encoded_into(blob, (fast,))
        ref.decode_and_add(blob)
    assert fast.count == ref.total_count
    assert list(fast.to_hdrh().counts) == list(ref.counts)
    assert (fast.min(), fast.max()) == (ref.get_min_value() / 1e6, ref.get_max_value() / 1e6)
    for p in (50, 99, 99.9):
        assert fast.percentile(p) == ref.get_value_at_percentile(p) / 1e6


def test_merge_of_a_blob_with_another_layout_falls_back_to_hdrh() -> None:
    from hdrh.histogram import HdrHistogram

    other = HdrHistogram(1, 60_000_000, 2)
    for v in (150, 2500, 40_000):
        other.record_value(v)
    h = LatencyHistogram()
    merge_encoded_into(other.encode(), (h,))
    assert h.count == 3
    assert abs(h.percentile(100) - 0.040) <= 0.040 * 0.01


def _hdrh_summary_ms(h: LatencyHistogram) -> dict[str, float | int]:
    """The slow reference: hdrh's own getters, one walk per percentile."""
    from loadgen.measure.histogram import PERCENTILES

    raw = h.to_hdrh()
    out: dict[str, float | int] = {"count": raw.total_count, "mean": round(raw.get_mean_value() / 1e3, 4)}
    for name, p in PERCENTILES:
        out[name] = round(raw.get_value_at_percentile(p) / 1e3, 4)
    out["max"] = round(raw.get_max_value() / 1e3, 4)
    return out


def test_one_pass_summary_equals_hdrh_getters() -> None:
    rng = random.Random(5)
    for digits, highest_s, scale in ((3, 3600.0, 0.05), (2, 60.0, 0.002)):
        for n in (1, 7, 1000, 20_000):
            h = LatencyHistogram(digits=digits, highest_s=highest_s)
            for _ in range(n):
                h.record(rng.lognormvariate(0, 1.2) * scale)
            h.record(0.0)  # a zero, at index 0
            assert h.summary_ms() == _hdrh_summary_ms(h), (digits, n)


def test_coarse_histogram_round_trips_and_is_small() -> None:
    parts = [LatencyHistogram(digits=2, highest_s=60.0) for _ in range(3)]
    whole = LatencyHistogram(digits=2, highest_s=60.0)
    rng = random.Random(9)
    for i in range(3000):
        v = rng.expovariate(1 / 0.003)
        parts[i % 3].record(v)
        whole.record(v)
    merged = LatencyHistogram(digits=2, highest_s=60.0)
    for part in parts:
        merge_encoded_into(part.encode(), (merged,))
    assert merged.summary_ms() == whole.summary_ms()
    assert merged.layout.counts_len * 8 < 25_000 < LatencyHistogram().layout.counts_len * 8
    big = LatencyHistogram(digits=2, highest_s=60.0)
    big.record(3600.0)  # beyond its range: clamped, not an error
    assert big.max() <= 61.0


def test_index_lookup_table_equals_the_computed_index() -> None:
    from loadgen.measure.chunk_gaps import _GAP_INDEX, _TABLE_TOP, _index

    table = _GAP_INDEX.table or _GAP_INDEX.build()
    assert len(table) == _TABLE_TOP
    assert list(table) == [_index(u) for u in range(_TABLE_TOP)]


def test_importing_does_no_work() -> None:
    # `loadgen validate` imports the module: no index table, no hdrh histogram or layout built, no decode buffer
    # until used.
    code = (
        "import loadgen.measure.histogram as m, loadgen.measure.chunk_gaps as g, loadgen.measure.hdr_layout as l\n"
        "import loadgen.measure.hist_merge as hm\n"
        "assert g._GAP_INDEX.table is None and hm._DECODE_BUFFER.counts is None and not l._LAYOUTS\n"
        "m.record_chunk_gaps(m.LatencyHistogram(), m.LatencyHistogram(), [0.0, 0.01], [1, 1])\n"
        "assert g._GAP_INDEX.table is not None\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_decode_buffer_serves_every_layout_and_holds_nothing_between_merges(monkeypatch: pytest.MonkeyPatch) -> None:
    from loadgen.measure.hist_merge import _DECODE_BUFFER

    monkeypatch.setenv("LOADGEN_PURE_PYTHON", "1")  # the Python path's buffer (the C merge reads into the targets)

    for layout in (
        {"digits": 3, "highest_s": 3600.0},
        {"digits": 2, "highest_s": 60.0},
        {"digits": 3, "highest_s": 3600.0},
    ):
        h, part = LatencyHistogram(**layout), LatencyHistogram(**layout)
        for v in (0.0001, 0.003, 0.2, 7.0):
            part.record(v)
        merge_encoded_into(part.encode(), (h,))
        assert h.summary_ms() == part.summary_ms()
    assert _DECODE_BUFFER.counts is not None and not any(_DECODE_BUFFER.counts)


def test_cdf_points_are_the_percentiles_with_the_tail_and_censoring() -> None:
    rng = random.Random(11)
    h = LatencyHistogram()
    for _ in range(5000):
        h.record(rng.lognormvariate(-3, 1))
    cdf = h.cdf_ms(points=50)
    fractions = [f for _, f in cdf]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0
    assert {0.995, 0.999, 0.9999} <= set(fractions) and len(cdf) == 53
    for ms, f in cdf:
        assert ms == round(h.percentile(100 * f) * 1e3, 4)
    # 500 failed requests rank above everything: the curve stops at the recorded share, at the max.
    cens = h.cdf_ms(points=50, censored=500)
    assert cens[-1] == [round(h.max() * 1e3, 4), round(5000 / 5500, 6)]
    assert all(f <= round(5000 / 5500, 6) for _, f in cens)
    assert LatencyHistogram().cdf_ms() == []
