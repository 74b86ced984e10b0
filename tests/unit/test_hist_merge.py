"""The master's merge of a wire histogram: the C one (`_hist_merge.c`, one call straight into the counts) and the
Python one (`merge_encoded_python`: the payload out of its form, hdrh's decode into a scratch array, the add) give the
same histogram (counts, total, min and max; counts and total as hdrh's own `decode_and_add`) on every case either
accepts, in every form a histogram travels in (the wire's raw payload, `encode()`'s base64 of it compressed, base64
of the raw one as aggregate.json holds it; bytes or str): empty, one slot, thousands, windows that must grow below
and above, aliases (one blob into several histograms), another layout; and corrupt input is the Python path's clear
error in both, never a crash nor a partial add. A group's histograms merged in one call (`merge_encoded_many`) are
the same as its items merged one by one, with the same error at the same item."""

from __future__ import annotations

import base64
import os
import random
import struct
import zlib
from collections.abc import Callable, Sequence

import pytest
from hdrh.histogram import HdrHistogram

from loadgen.measure import _hist_merge, hist_merge
from loadgen.measure.hist_merge import (
    merge_encoded_into,
    merge_encoded_many,
    merge_encoded_python,
    native_merge_available,
)
from loadgen.measure.histogram import LatencyHistogram
from loadgen.pure_python import pure_python

Merge = Callable[[bytes | str, Sequence[LatencyHistogram]], None]


def test_the_c_merge_is_built() -> None:
    # CI and the image build it (a compiler and zlib's headers are there); without it the Python path runs, slower.
    assert native_merge_available()


def _state(h: LatencyHistogram) -> tuple[list[int], int, int, int]:
    ref = h.to_hdrh()
    return list(ref.counts), ref.total_count, ref.min_value, ref.max_value


def _hist(values: Sequence[float], **kw: float) -> LatencyHistogram:
    h = LatencyHistogram(**kw)  # type: ignore[arg-type]
    for v in values:
        h.record(v)
    return h


def _cases() -> list[list[float]]:
    rng = random.Random(5)
    return [
        [],
        [0.0],  # slot 0
        [0.0305],
        [3600.0],  # the top of the layout
        [1e-6] * 3 + [1800.0],  # both ends: a long run of empty slots between
        [rng.lognormvariate(-3.5, 0.6) for _ in range(300)],
        [rng.lognormvariate(-4, 2.0) for _ in range(5000)],
        [rng.expovariate(50) for _ in range(40)],
    ]


def _merged(merge: Merge, blobs: Sequence[bytes | str], targets: int, **kw: float) -> list[LatencyHistogram]:
    out = [LatencyHistogram(**kw) for _ in range(targets)]  # type: ignore[arg-type]
    for b in blobs:
        merge(b, out)
    return out


def _forms(h: LatencyHistogram) -> list[bytes | str]:
    """Every form `h` travels in: the wire's raw payload, base64 of it (bytes and str: aggregate.json), `encode()`'s
    (bytes and str)."""
    raw, enc = h.wire(), h.encode()
    b64 = base64.b64encode(raw)
    return [raw, b64, b64.decode("ascii"), enc, enc.decode("ascii")]


_FORM_NAMES = ["wire", "wire-base64", "wire-base64-str", "encode", "encode-str"]


@pytest.mark.parametrize("form", range(len(_FORM_NAMES)), ids=_FORM_NAMES)
@pytest.mark.parametrize("targets", [1, 3])
def test_c_and_python_merges_are_equal_and_hdrh_s(targets: int, form: int) -> None:
    # In turn, so that windows grow below (a later case lower than an earlier one) and above, and stay.
    cases = _cases()
    hists = [_hist(v) for v in cases] + [_hist(v) for v in reversed(cases)]
    blobs = [_forms(h)[form] for h in hists]
    ref = HdrHistogram(1, 3_600_000_000, 3)
    for h in hists:
        ref.decode_and_add(h.encode())
    c = _merged(merge_encoded_into, blobs, targets)
    py = _merged(merge_encoded_python, blobs, targets)
    want = (list(ref.counts), ref.total_count, ref.min_value, ref.max_value)
    for h in (*c, *py):
        assert _state(h) == want


def test_every_case_alone_in_every_form() -> None:
    for values in _cases():
        blob = _hist(values).encode()
        for form in _forms(_hist(values)):
            (c,) = _merged(merge_encoded_into, [form], 1)
            (py,) = _merged(merge_encoded_python, [form], 1)
            ref = HdrHistogram(1, 3_600_000_000, 3)
            ref.decode_and_add(blob)
            assert _state(c) == _state(py)
            assert _state(c)[:2] == (list(ref.counts), ref.total_count)


def test_targets_with_windows_already_held_and_none() -> None:
    # An alias set where one histogram holds a window, one holds another, one none: each ends as hdrh says.
    rng = random.Random(9)
    low = _hist([rng.uniform(1e-5, 1e-4) for _ in range(50)])
    high = _hist([rng.uniform(10, 100) for _ in range(50)])
    blob = _hist([rng.uniform(1e-3, 1.0) for _ in range(500)]).encode()
    ends = []
    for merge in (merge_encoded_into, merge_encoded_python):
        a, b, c = _hist([]), LatencyHistogram(), LatencyHistogram()
        a.merge(low)
        b.merge(high)
        merge(blob, [a, b, c])
        for start, got in ((low, a), (high, b), (LatencyHistogram(), c)):
            ref = start.to_hdrh()
            ref.decode_and_add(blob)
            assert _state(got)[:2] == (list(ref.counts), ref.total_count)
        ends.append([_state(h) for h in (a, b, c)])
    assert ends[0] == ends[1]


def test_another_layout_is_mapped_as_the_python_path_does() -> None:
    # The health's loop-lag histogram (2 digits, 60 s) into a latency histogram: C leaves it to Python.
    lag = _hist([0.0004, 0.002, 0.03, 1.5], digits=2, highest_s=60.0).encode()
    (c,) = _merged(merge_encoded_into, [lag], 1)
    (py,) = _merged(merge_encoded_python, [lag], 1)
    assert _state(c) == _state(py)
    # And a 2-digit blob into 2-digit histograms: the C path, equal.
    (c2,) = _merged(merge_encoded_into, [lag], 1, digits=2, highest_s=60.0)
    (py2,) = _merged(merge_encoded_python, [lag], 1, digits=2, highest_s=60.0)
    assert _state(c2) == _state(py2)
    # The health ships it raw: mapped the same, both paths (hdrh decodes it re-wrapped in its own form).
    raw = _hist([0.0004, 0.002, 0.03, 1.5], digits=2, highest_s=60.0).wire()
    (c3,) = _merged(merge_encoded_into, [raw], 1)
    (py3,) = _merged(merge_encoded_python, [raw], 1)
    assert _state(c3) == _state(py3) == _state(c)


def test_the_wire_form_is_hdrh_s_payload() -> None:
    # `wire()` is exactly what hdrh deflates in `encode()`: inflating encode()'s blob gives the same bytes; and
    # `decode` reads it back as it reads encode()'s (the counts; min and max, as any V2 blob, at their slots).
    for values in _cases():
        h = _hist(values)
        raw = base64.b64decode(h.encode())
        assert zlib.decompress(raw[8 : 8 + struct.unpack_from(">i", raw, 4)[0]]) == h.wire()
        back = LatencyHistogram.decode(h.wire())
        assert _state(back) == _state(LatencyHistogram.decode(h.encode()))
        assert _state(back)[:2] == _state(h)[:2]


def _reencode(blob: bytes, edit: Callable[[bytes], bytes]) -> bytes:
    """The blob with its inflated payload edited, compressed and wrapped again."""
    raw = base64.b64decode(blob)
    cookie, length = struct.unpack_from(">ii", raw)
    payload = edit(zlib.decompress(raw[8 : 8 + length]))
    z = zlib.compress(payload)
    return base64.b64encode(struct.pack(">ii", cookie, len(z)) + z)


def _corrupt_cases() -> list[bytes | str]:
    blob = _hist([0.01, 0.02, 0.5, 3.0]).encode()
    raw = base64.b64decode(blob)
    flipped = bytearray(raw)
    flipped[20] ^= 0xFF  # inside the zlib stream
    wire = _hist([0.01, 0.02, 0.5, 3.0]).wire()
    return [
        blob[:-6],  # cut base64
        b"!!" + blob,  # characters outside the alphabet
        "é" + blob.decode(),
        base64.b64encode(b"\x00\x00\x00\x00" + raw[4:]),  # not a V2 cookie
        base64.b64encode(raw[:8] + raw[8:20]),  # a zlib stream cut short
        base64.b64encode(bytes(flipped)),
        base64.b64encode(raw[:4] + struct.pack(">i", 10**6) + raw[8:]),  # a length past the end
        _reencode(blob, lambda p: p[:-1] + b"\x80"),  # a varint cut short
        _reencode(blob, lambda p: p + b"\x02" * 30_000),  # counts past the layout's last slot
        _reencode(blob, lambda p: p[:8] + struct.pack(">I", 5) + p[12:]),  # a normalizing offset
        _reencode(blob, lambda p: p[:4] + struct.pack(">I", 10**6) + p[8:]),  # a payload length it does not have
        b"",
        # The wire's raw form: cut short, past the layout, a normalizing offset, a wrong length, a cookie that is not
        # V2's behind the raw form's first byte, the first byte alone; and base64 of a raw payload cut short.
        wire[:-1] + b"\x80",
        wire + b"\x02" * 30_000,
        wire[:8] + struct.pack(">I", 5) + wire[12:],
        wire[:4] + struct.pack(">I", 10**6) + wire[8:],
        b"\x1c\x00\x00\x00" + wire[4:],
        b"\x1c",
        wire[:30],
        base64.b64encode(wire[:30]),
    ]


def _outcome(merge: Merge, blob: bytes | str) -> tuple[str, tuple[list[int], int, int, int]]:
    h = _hist([0.005, 0.007])
    try:
        merge(blob, [h])
    except Exception as e:  # noqa: BLE001 - which error, compared between the two paths
        return type(e).__name__, _state(h)
    return "", _state(h)


@pytest.mark.parametrize("i", range(len(_corrupt_cases())))
def test_corrupt_input_is_the_python_path_s_outcome(i: int) -> None:
    blob = _corrupt_cases()[i]
    c, py = _outcome(merge_encoded_into, blob), _outcome(merge_encoded_python, blob)
    assert c == py
    # The Python path's reused decode array holds nothing afterwards (a varint cut short had left counts in it,
    # which the next merge in the process added).
    counts = hist_merge._DECODE_BUFFER.counts
    assert counts is None or not any(counts)


@pytest.mark.parametrize("i", range(len(_corrupt_cases())))
def test_the_c_call_adds_nothing_from_a_blob_it_does_not_read(i: int) -> None:
    blob = _corrupt_cases()[i]
    h = _hist([0.005, 0.007])
    before = _state(h)
    lay = h.layout
    status, _, _, _ = _hist_merge.merge_v2(blob, *lay.key, lay.counts_len, [(h.counts_window()[1], 0)])
    assert status == 2
    assert _state(h) == before


def test_the_c_call_asks_for_a_window_before_it_adds() -> None:
    blob = _hist([0.5, 2.0]).encode()
    h = _hist([1e-5])  # a window far below the blob's slots
    before = _state(h)
    lay = h.layout
    off, counts = h.counts_window()
    status, total, lo, hi = _hist_merge.merge_v2(blob, *lay.key, lay.counts_len, [(counts, off)])
    assert (status, total) == (1, 2) and lo == lay.index(500_000) and hi == lay.index(2_000_000)
    assert _state(h) == before
    with pytest.raises(ValueError, match="targets"):
        _hist_merge.merge_v2(blob, *lay.key, lay.counts_len, [])


def _batch() -> tuple[list[tuple[bytes | str, list[int]]], int]:
    """(blob, indices of the target histograms) items over a pool of latency histograms: every case in every form,
    alone and as an alias set, in an order that makes windows grow below and above mid-batch; a 2-digit blob (another
    layout, mapped); empty ones. And the pool's size."""
    items: list[tuple[bytes | str, list[int]]] = []
    cases = _cases()
    for round_, order in enumerate((cases, list(reversed(cases)))):
        for k, values in enumerate(order):
            for f, form in enumerate(_forms(_hist(values))):
                items.append((form, [(k + f + round_) % 5] if f % 2 else [(k + f) % 5, 5 + k % 3, 8]))
    items.insert(7, (_hist([0.0004, 0.03], digits=2, highest_s=60.0).wire(), [1, 6]))
    items.insert(3, (_hist([]).wire(), [2]))
    return items, 9


def _pool_merged(merge_items: Callable[[list[tuple[bytes | str, Sequence[LatencyHistogram]]]], None]) -> list:
    items, n = _batch()
    pool = [LatencyHistogram() for _ in range(n)]
    merge_items([(blob, [pool[i] for i in idx]) for blob, idx in items])
    return [_state(h) for h in pool]


def _one_by_one(items: list[tuple[bytes | str, Sequence[LatencyHistogram]]]) -> None:
    for blob, targets in items:
        merge_encoded_python(blob, targets)


def test_many_in_one_call_are_the_items_merged_one_by_one() -> None:
    assert _pool_merged(merge_encoded_many) == _pool_merged(_one_by_one)


def test_many_stops_at_a_corrupt_item_as_one_by_one_does() -> None:
    # The items before it merged, the corrupt one's error, nothing after it: as merging them in turn.
    good = [_hist([0.01, 0.3]).wire(), _hist([2.0]).encode()]
    for bad in _corrupt_cases():
        ends = []
        for merge_items in (merge_encoded_many, _one_by_one):
            pool = [_hist([0.005]), LatencyHistogram()]
            try:
                merge_items([(good[0], pool), (bad, [pool[1]]), (good[1], pool)])
            except Exception as e:  # noqa: BLE001 - which error, compared between the two
                ends.append((type(e).__name__, [_state(h) for h in pool]))
            else:
                ends.append(("", [_state(h) for h in pool]))
        assert ends[0] == ends[1]


def test_the_many_call_leaves_what_it_does_not_merge_to_the_caller() -> None:
    lay = LatencyHistogram().layout
    lowest_at, highest_at = lay.slot_values()
    low, high, fresh = _hist([1e-5]), _hist([0.4, 2.5]), LatencyHistogram()
    blob = _hist([0.5, 2.0]).wire()
    args = (lay, *lay.key, lay.counts_len, lowest_at, highest_at)
    # `high` holds a window over the blob's slots: merged; `low` does not, nor `fresh` (no window): left, untouched.
    assert _hist_merge.merge_many([(blob, (high,))], 0, *args) == -1
    assert high.count == 4 and high.min() == pytest.approx(0.4, rel=1e-3) and high.max() == pytest.approx(2.5, rel=1e-3)
    before = _state(low)
    assert _hist_merge.merge_many([(blob, (high,)), (blob, (low,)), (blob, (fresh,))], 0, *args) == 1
    assert _state(low) == before and high.count == 6
    assert _hist_merge.merge_many([(blob, (fresh,))], 0, *args) == 0 and fresh.count == 0
    # Another layout's histogram, an item that is not (blob, histograms), slot values of another length.
    assert _hist_merge.merge_many([(blob, (_hist([], digits=2, highest_s=60.0),))], 0, *args) == 0
    with pytest.raises(TypeError, match="item"):
        _hist_merge.merge_many([blob], 0, *args)
    with pytest.raises(ValueError, match="slot values"):
        _hist_merge.merge_many([], 0, lay, *lay.key, lay.counts_len, lowest_at[:5], highest_at)


def test_pure_python_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOADGEN_PURE_PYTHON", "1")
    assert not native_merge_available()
    blob = _hist([0.01, 0.2]).encode()
    (h,) = _merged(merge_encoded_into, [blob], 1)
    (py,) = _merged(merge_encoded_python, [blob], 1)
    assert _state(h) == _state(py)
    assert h.count == 2
    assert _pool_merged(merge_encoded_many) == _pool_merged(_one_by_one)


@pytest.mark.parametrize("value", [None, "", "0", "1"])
def test_pure_python_reads_the_environment_as_os_does(monkeypatch: pytest.MonkeyPatch, value: str | None) -> None:
    """The switch's one-lookup read (measure/pure_python.py) answers as `os.environ.get` does, at every call."""
    if value is None:
        monkeypatch.delenv("LOADGEN_PURE_PYTHON", raising=False)
    else:
        monkeypatch.setenv("LOADGEN_PURE_PYTHON", value)
    assert pure_python() is bool(os.environ.get("LOADGEN_PURE_PYTHON"))
    assert native_merge_available() is not bool(os.environ.get("LOADGEN_PURE_PYTHON"))  # (the C merge is built)
