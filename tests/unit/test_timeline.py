from __future__ import annotations

import copy
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord, TokenSource
from loadgen.measure.timeline import MAX_BINS, Timeline

T0 = 1_700_000_000  # an epoch second, a multiple of 256: bins of up to 256 s start there


def _rec(variant: str, sent: float, times: list[float], tokens: list[int], **kw: object) -> RequestRecord:
    rec = RequestRecord(f"{variant}-{sent}", variant, "chat", sent=sent, done=times[-1] + 0.01 if times else sent + 1)
    rec.chunk_times, rec.chunk_tokens = list(times), list(tokens)
    rec.output_tokens = sum(tokens)
    rec.token_source = TokenSource.SERVER
    for k, v in kw.items():
        setattr(rec, k, v)
    return rec


def _records(n: int, seed: int = 3) -> list[tuple[RequestRecord, float]]:
    """Requests of two variants over ~40 s, some failing, some streaming across second boundaries; with the wall
    time each was recorded at (monotonic 0 = epoch T0)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        sent = rng.uniform(0, 40)
        chunks = rng.randint(1, 30)
        times = [sent + 0.05 + 0.04 * j for j in range(chunks)]
        tokens = [rng.randint(1, 3) for _ in range(chunks)]
        kw: dict[str, object] = {}
        if i % 11 == 0:
            kw["error"] = ErrorKind.HTTP_5XX if i % 2 else ErrorKind.TIMEOUT
            if i % 3 == 0:
                times, tokens = [], []
        rec = _rec(("a", "b")[i % 2], sent, times, tokens, **kw)
        if i % 7 == 0:
            rec.output_tokens = (rec.output_tokens or 0) + 1  # usage counts an EOS no chunk carried
        assert rec.done is not None
        out.append((rec, T0 + rec.done))
    return out


def test_a_stream_s_tokens_land_in_the_seconds_they_arrived() -> None:
    tl = Timeline()
    # Chunks at 0.5, 1.2, 1.9, 2.6 s after T0 (3 tokens each), done at 2.7: recorded then.
    rec = _rec("a", 0.4, [0.5, 1.2, 1.9, 2.6], [3, 3, 3, 3])
    tl.add(rec, T0 + 2.61 + 0.01, window_start=float("-inf"))
    col = tl.report("a")
    assert col["start_unix_s"] == T0 and col["bin_s"] == 1
    assert col["output_tokens_per_s"] == [3.0, 6.0, 3.0]
    # Completions, TTFT and E2E where the request finished.
    assert col["ok"] == [0, 0, 1]
    assert col["ttft_mean_ms"] == [None, None, 100.0]
    assert col["e2e_max_ms"] == [None, None, 2210.0]


def test_errors_by_class_and_warmup_tokens_after_the_window_start() -> None:
    tl = Timeline()
    tl.add(_rec("a", 0.0, [0.1], [1], error=ErrorKind.HTTP_429), T0 + 0.2, window_start=0.0)
    tl.add(_rec("a", 0.0, [], [], error=ErrorKind.TIMEOUT), T0 + 1.5, window_start=0.0)
    # Sent in the warm-up (which ended at 1.0): only its tokens from 1.0 on count, and it is no completion.
    tl.add(_rec("a", 0.0, [0.5, 0.9, 1.1, 1.3], [2, 2, 2, 2], warmup=True), T0 + 1.4, window_start=1.0)
    col = tl.report("a")
    assert col["errors"] == {"http_429": [1, 0], "timeout": [0, 1]}
    assert col["ok"] == [0, 0]
    assert col["output_tokens_per_s"] == [1.0, 4.0]
    assert col["ttft_mean_ms"] == [100.0, None]  # the 429 got a first token, the timeout none


def test_worker_split_merges_to_one_process_s_timeline() -> None:
    recs = _records(400)
    whole = Aggregate(window_start=2.0)
    master = Aggregate()
    workers = [Aggregate(window_start=2.0) for _ in range(3)]
    for i, (rec, wall) in enumerate(recs):
        whole.add(rec, wall)
        workers[i % 3].add(rec, wall)
        if i % 37 == 36:  # deltas at different moments, counters only now and then
            master.merge_wire(workers[i % 3].pop_delta(histograms=i % 74 == 73))
    for w in workers:
        master.merge_wire(w.pop_delta())
    for v in ("a", "b"):
        assert master.variant_timeline.report(v) == whole.variant_timeline.report(v)
        col = whole.variant_timeline.report(v)
        g = whole.merged_variant(v)
        # The same tokens as the report's throughput, and every measured request in one bin.
        assert round(sum(col["output_tokens_per_s"])) == g.output_tokens
        assert sum(col["ok"]) == g.ok
        assert sum(sum(c) for c in col["errors"].values()) == sum(g.errors.values())
    assert whole.variant_timeline.report("a")["errors"]  # the data had errors to compare


def test_a_long_run_coarsens_bins_the_same_in_any_merge_order() -> None:
    early, late = Timeline(), Timeline()
    for s in range(0, 300):
        early.add(_rec("a", s, [s + 0.1], [1]), T0 + s + 0.2, float("-inf"))
    for s in range(300, 3 * MAX_BINS):
        late.add(_rec("a", s, [s + 0.1], [1]), T0 + s + 0.2, float("-inf"))
    assert early.width_s == 1 and late.width_s == 4  # 1,236 seconds do not fit 512 bins of 2 s
    one, two = Timeline(), Timeline()
    one.merge_wire(early.to_wire())
    one.merge_wire(late.to_wire())
    two.merge_wire(late.to_wire())
    two.merge_wire(early.to_wire())
    assert one.width_s == two.width_s == 4
    assert one.report("a") == two.report("a")
    col = one.report("a")
    assert len(col["ok"]) <= MAX_BINS and sum(col["ok"]) == 3 * MAX_BINS
    assert col["ok"][:2] == [4, 4]  # 4 one-second requests per 4 s bin
    assert col["output_tokens_per_s"][0] == 1.0  # a rate: tokens per second of the bin


def test_variants_share_one_time_axis() -> None:
    tl = Timeline()
    tl.add(_rec("a", 0.0, [0.1], [1]), T0 + 0.2, float("-inf"))
    tl.add(_rec("b", 5.0, [5.1], [1]), T0 + 5.2, float("-inf"))
    a, b = tl.report("a"), tl.report("b")
    assert a["start_unix_s"] == b["start_unix_s"] == T0
    assert a["ok"] == [1, 0, 0, 0, 0, 0] and b["ok"] == [0, 0, 0, 0, 0, 1]


def _near(estimate: float | None, truth: float) -> bool:
    return estimate is not None and abs(estimate - truth) <= 0.01 * truth  # the per-bin histograms' 1 %


def test_each_bin_s_p50_and_p99_are_its_own_samples_within_1_percent() -> None:
    """Known samples per bin: TTFT 1..100 ms in second 0, 201..300 ms (shuffled) in second 2, none in second 1;
    E2E = TTFT + 1 s. Nearest rank (⌈p/100·n⌉-th value): p50 = 50th, p99 = 99th of 100."""
    rng = random.Random(1)
    recs: list[tuple[RequestRecord, float]] = []
    for sec, ttfts in ((0, list(range(1, 101))), (2, rng.sample(range(201, 301), 100))):
        for ms in ttfts:
            sent = sec + 0.001
            rec = _rec("a", sent, [sent + ms / 1e3], [1])
            rec.done = sent + 1 + ms / 1e3
            recs.append((rec, T0 + sec + 0.5))  # completed inside second `sec`
    whole, workers = Timeline(), [Timeline() for _ in range(3)]
    for i, (rec, wall) in enumerate(recs):
        whole.add(rec, wall, float("-inf"))
        workers[i % 3].add(rec, wall, float("-inf"))
    merged = Timeline()
    for w in workers:
        merged.merge_wire(w.to_wire())
    col = whole.report("a")
    assert merged.report("a") == col  # the workers' bins merge to one process's
    at = {sec: T0 + sec - col["start_unix_s"] for sec in (0, 1, 2)}  # (the first tokens came a second earlier)
    assert col["ttft_p50_ms"][at[1]] is None and col["ttft_p99_ms"][at[1]] is None  # an empty bin has none
    for i, (p50, p99) in ((at[0], (50, 99)), (at[2], (250, 299))):
        assert _near(col["ttft_p50_ms"][i], p50) and _near(col["ttft_p99_ms"][i], p99), (i, col)
        assert _near(col["e2e_p50_ms"][i], 1000 + p50) and _near(col["e2e_p99_ms"][i], 1000 + p99), (i, col)
    # The mean stays beside them (it is not what the charts draw any more): 50.5 ms and 250.5 ms.
    assert col["ttft_mean_ms"][at[0]] == 50.5 and col["ttft_mean_ms"][at[2]] == 250.5


# A bin's wire row merged in C (`_hist_merge.merge_bin_row`) equals the Python loop: the same counters, errors and
# error raised for every row, well-formed or not (floats, bools, strings, None, a short row, no errors dict).
_VALUES = st.one_of(
    st.integers(-5, 2**40), st.integers(2**63 - 2, 2**64), st.sampled_from([1.5, True, "7", None, 2**70])
)
_ERRORS = st.one_of(
    st.dictionaries(
        st.sampled_from(["timeout", "http_5xx", "refused"]), st.one_of(st.integers(0, 9), _VALUES), max_size=3
    ),
    st.sampled_from([[], None, "x"]),
)


def _bin_after(start: list[Any], row: list[Any], pure: bool) -> tuple[Any, list[Any], dict[str, Any]]:
    from loadgen.measure.timeline import _INTS, Bin

    b = Bin()
    for name, value in zip(_INTS, start, strict=False):
        setattr(b, name, value)
    b.errors = {"timeout": 1}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LOADGEN_PURE_PYTHON", "1" if pure else "")
        try:
            b.merge_row(copy.deepcopy(row))
            error = None
        except Exception as e:  # noqa: BLE001 - the error is what is compared
            error = (type(e).__name__, str(e))
    return error, [getattr(b, n) for n in _INTS], dict(b.errors)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.integers(0, 2**40), min_size=8, max_size=8),
    st.lists(_VALUES, max_size=9),
    _ERRORS,
    st.booleans(),
)
def test_a_bin_row_merged_in_c_equals_the_python_loop(
    start: list[int], ints: list[Any], errors: Any, whole: bool
) -> None:
    row: list[Any] = (ints[:8] + [0] * (8 - len(ints)) if whole else ints) + [errors]
    assert _bin_after(start, row, pure=False) == _bin_after(start, row, pure=True)


def test_the_c_bin_row_takes_the_workers_rows_and_leaves_the_rest() -> None:
    from loadgen.measure import _hist_merge
    from loadgen.measure.timeline import _INTS, _IS_MAX, Bin

    b = Bin()
    b.ttft_max_us = 50
    row = [1, 2, 3, 4, 40, 6, 7, 80, {"timeout": 2}]
    assert _hist_merge.merge_bin_row(b, _INTS, _IS_MAX, row)
    assert [getattr(b, n) for n in _INTS] == [1, 2, 3, 4, 50, 6, 7, 80] and b.errors == {"timeout": 2}
    for odd in ([1.0, 2, 3, 4, 5, 6, 7, 8, {}], [1, 2, 3, 4, 5, 6, 7, True, {}], [1, 2, 3], [1] * 8 + [[]], (1,) * 9):
        assert not _hist_merge.merge_bin_row(b, _INTS, _IS_MAX, odd)
        assert [getattr(b, n) for n in _INTS] == [1, 2, 3, 4, 50, 6, 7, 80] and b.errors == {"timeout": 2}
    assert not _hist_merge.merge_bin_row(b, _INTS, _IS_MAX, [1] * 8 + [{"timeout": 1.0}])
    assert b.errors == {"timeout": 2}  # nothing changed
