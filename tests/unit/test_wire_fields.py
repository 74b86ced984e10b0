"""The C merge of a stats object's wire fields (`_hist_merge.add_fields` / `wire_items`) against the Python paths
(measure/wire_fields.py) on every input either meets: well-formed wires and corrupt ones (a counter that is no
number, counts that are no dict, an alias that is no dict, histograms that are no dict), with the same fields after
and the same error; and the group and slice merges that use them, C against Python, on a real aggregate's wire."""

from __future__ import annotations

import copy
import os
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.measure import _hist_merge
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.measure.wire_fields import (
    COUNTER,
    COUNTS,
    add_counts,
    add_fields,
    add_fields_python,
    wire_items_python,
)

KINDS = {"requests": COUNTER, "ok": COUNTER, "tokens": COUNTER, "fates": COUNTS, "errors": COUNTS}


class Fields:
    def __init__(self) -> None:
        self.requests = 3
        self.ok = 0
        self.tokens = 10
        self.fates: dict[str, int] = {"succeeded": 2}
        self.errors: dict[str, int] = {}

    def state(self) -> dict[str, Any]:
        return dict(vars(self))


_VALUES = st.one_of(
    st.integers(-(2**70), 2**70),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6),
    st.sampled_from(["7", "x", "", None, [], [1], 0, b"2"]),
)
_COUNT_MAPS = st.one_of(
    st.dictionaries(st.sampled_from(["succeeded", "failed", "timeout"]), st.one_of(st.integers(0, 9), st.just("z"))),
    st.sampled_from([None, [], "abc", 5, [("a", 1)]]),
)
_WIRES = st.dictionaries(
    st.sampled_from([*KINDS, "hists", "alias", "unknown"]),
    st.one_of(_VALUES, _COUNT_MAPS),
)


def _outcome(fn: Any, *args: Any) -> tuple[str, str] | None:
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001 - the error itself is what is compared
        return type(e).__name__, str(e)
    return None


@settings(max_examples=400, deadline=None)
@given(_WIRES)
def test_add_fields_in_c_equals_the_python_path(wire: dict[str, Any]) -> None:
    py, c = Fields(), Fields()
    py_error = _outcome(add_fields_python, py, copy.deepcopy(wire), KINDS)
    c_error = _outcome(_hist_merge.add_fields, c, copy.deepcopy(wire), KINDS, add_counts)
    assert c_error == py_error
    assert c.state() == py.state()


def test_add_fields_adds_counters_and_counts_and_skips_what_is_not_a_field() -> None:
    f = Fields()
    add_fields(f, {"requests": 2, "ok": True, "tokens": 0, "fates": {"succeeded": 1, "failed": 4}, "hists": 9}, KINDS)
    assert f.state() == {"requests": 5, "ok": 1, "tokens": 10, "fates": {"succeeded": 3, "failed": 4}, "errors": {}}
    with pytest.raises(ValueError, match="invalid literal"):
        add_fields(f, {"requests": "x"}, KINDS)


class Hist:
    """A stand-in histogram: only its identity matters to `wire_items`."""

    def __init__(self, name: str) -> None:
        self.name = name


def _maker(targets: dict[str, Any]) -> Any:
    def make(m: str) -> Hist:
        h = targets[m] = Hist(m)
        return h

    return make


def _shape(items: list[tuple[Any, Any]]) -> list[tuple[Any, str, list[str]]]:
    return [(blob, type(to).__name__, [h.name for h in to]) for blob, to in items]


_METRICS = st.sampled_from(["ttft", "e2e", "itl", "icl", "tpot"])
_HISTS = st.one_of(st.dictionaries(_METRICS, st.binary(max_size=3)), st.sampled_from([None, [], "ttft", 3]))
_ALIASES = st.one_of(
    st.none(),
    st.dictionaries(_METRICS, _METRICS),
    st.sampled_from([[], "", "icl", ["icl"], 1, {"icl": ["itl"]}]),
)


@settings(max_examples=400, deadline=None)
@given(_HISTS, _ALIASES, st.lists(_METRICS, unique=True))
def test_wire_items_in_c_equal_the_python_path(hists: Any, alias: Any, have: list[str]) -> None:
    py_targets = {m: Hist(m) for m in have}
    c_targets = dict(py_targets)
    try:
        py: Any = _shape(wire_items_python(py_targets, hists, alias, _maker(py_targets)))
    except Exception as e:  # noqa: BLE001
        py = (type(e).__name__, str(e))
    try:
        # What the C call hands back (None) goes to the Python path, as `merge_stats` hands the wire back whole.
        got = _hist_merge.wire_items(c_targets, hists, alias, _maker(c_targets))
        c: Any = _shape(got if got is not None else wire_items_python(c_targets, hists, alias, _maker(c_targets)))
    except Exception as e:  # noqa: BLE001
        c = (type(e).__name__, str(e))
    assert c == py
    assert list(c_targets) == list(py_targets)  # the same histograms made, in the same order
    assert all(c_targets[m] is py_targets[m] for m in have)


def test_wire_items_share_an_aliased_blob_and_leave_a_form_they_do_not_read() -> None:
    targets: dict[str, Any] = {}
    items = _hist_merge.wire_items(targets, {"itl": b"a", "e2e": b"b"}, {"icl": "itl", "x": "gone"}, _maker(targets))
    assert items is not None and _shape(items) == [(b"a", "list", ["itl", "icl"]), (b"b", "list", ["e2e"])]
    assert list(targets) == ["itl", "e2e", "icl"]  # an alias of a blob the wire does not hold makes nothing
    assert _hist_merge.wire_items({}, ["itl"], None, _maker({})) is None
    assert _hist_merge.wire_items({}, {"itl": b"a"}, "icl", _maker({})) is None


def _aggregate(seed: int) -> Aggregate:
    rng = random.Random(seed)
    agg = Aggregate(window_start=0.0)
    for j in range(300):
        r = RequestRecord(f"r{seed}-{j}", f"v{j % 3}", f"m{j % 2}", bucket=f"b{j % 4}", sent=1.0 + j * 0.01)
        t = r.sent + rng.uniform(0.01, 0.5)
        for i in range(rng.randint(1, 6)):
            r.chunk_times.append(t + i * rng.uniform(0.001, 0.05))
            r.chunk_tokens.append(rng.randint(1, 3))
        r.done = r.chunk_times[-1] + 0.001
        r.output_tokens = sum(r.chunk_tokens)
        r.prompt_tokens = rng.randint(10, 500)
        if j % 17 == 0:
            r.error = ErrorKind.HTTP_5XX
        agg.add(r, 1000.0 + j * 0.01)
    return agg


def test_groups_and_slices_merged_in_c_equal_the_python_path(monkeypatch: pytest.MonkeyPatch) -> None:
    wires = [_aggregate(s).to_wire() for s in range(3)]
    merged_c = Aggregate()
    for w in wires:
        merged_c.merge_wire(copy.deepcopy(w))
    monkeypatch.setenv("LOADGEN_PURE_PYTHON", "1")
    merged_py = Aggregate()
    for w in wires:
        merged_py.merge_wire(copy.deepcopy(w))
    assert merged_c.to_wire() == merged_py.to_wire()
    g = merged_c.groups[("v0", "m0")]
    assert g.requests == sum(x.groups[("v0", "m0")].requests for x in map(_aggregate, range(3))) and g.errors
    assert merged_c.buckets and all(b.hists for b in merged_c.buckets.values())


def _group_wire(seed: int) -> dict[str, Any]:
    return _aggregate(seed).groups[("v0", "m0")].to_wire()


def _merged(target: Any, wires: list[dict[str, Any]], pure: bool) -> tuple[Any, Any]:
    """`target` (a GroupStats, an Aggregate) after merging `wires` in turn with LOADGEN_PURE_PYTHON as `pure`: the
    error (None when none), and its wire form."""
    old = os.environ.get("LOADGEN_PURE_PYTHON")
    os.environ["LOADGEN_PURE_PYTHON"] = "1" if pure else ""
    try:
        for w in wires:
            target.merge_wire(copy.deepcopy(w))
        error = None
    except Exception as e:  # noqa: BLE001 - the error is what is compared
        error = (type(e).__name__, str(e))
    finally:
        if old is None:
            del os.environ["LOADGEN_PURE_PYTHON"]
        else:
            os.environ["LOADGEN_PURE_PYTHON"] = old
    return error, target.to_wire()


def _merge_group(wires: list[dict[str, Any]], pure: bool, before: Any = None) -> tuple[Any, Any]:
    """A GroupStats after merging `wires` in turn (LOADGEN_PURE_PYTHON as `pure`): the error, and its wire form."""
    from loadgen.measure.group_stats import GroupStats

    g = GroupStats()
    if before is not None:
        before(g)
    return _merged(g, wires, pure)


@pytest.mark.parametrize(
    "corrupt",
    [
        {},
        {"hists": "x"},
        {"alias": "icl"},
        {"alias": {}},
        {"requests": "x"},
        {"fates": [1]},
        {"hists": {"ttft": b"not a histogram"}},
        {"hists": {"ttft": "%%%%"}},
    ],
)
def test_a_group_merged_in_one_c_call_equals_the_python_path(corrupt: dict[str, Any]) -> None:
    """`merge_stats` (histograms, then fields, in one call) against the Python path: well-formed wires, a form it
    hands back whole (histograms or an alias that are no dict), a blob it hands back to `merge_encoded_into`, and
    fields the Python path rejects — the same histograms, fields and error."""
    wires = [_group_wire(1), {**_group_wire(2), **corrupt}, _group_wire(3)]
    c, py = _merge_group(wires, pure=False), _merge_group(wires, pure=True)
    assert c == py
    assert (c[0] is None) == (corrupt in ({}, {"alias": {}}))


def test_a_histogram_of_another_layout_is_handed_back_and_mapped() -> None:
    from loadgen.measure.histogram import LatencyHistogram

    def other_layout(g: Any) -> None:
        g.hists["e2e"] = LatencyHistogram(digits=2)  # not the layout the C call reads into: merged in Python

    wires = [_group_wire(4), _group_wire(5)]
    c, py = _merge_group(wires, False, other_layout), _merge_group(wires, True, other_layout)
    assert c == py and c[0] is None and c[1]["hists"]["e2e"]


def test_merge_stats_leaves_what_it_does_not_read_untouched() -> None:
    from loadgen.measure.group_stats import GroupStats
    from loadgen.measure.wire_fields import _layout

    g = GroupStats()
    args = (add_counts, g._hist, True, _layout(), *_layout().merge_args())
    assert _hist_merge.merge_stats(g, {"hists": [1], "requests": 3}, {"requests": COUNTER}, *args) is False
    assert _hist_merge.merge_stats(g, {"alias": "icl", "requests": 3}, {"requests": COUNTER}, *args) is False
    assert g.requests == 0 and g.hists == {}
    assert _hist_merge.merge_stats(g, {"requests": 3}, {"requests": COUNTER}, *args) is None and g.requests == 3


def _rich_wire(seed: int) -> dict[str, Any]:
    """An aggregate's wire with rows of every kind `merge_rows` reads: groups, classes, adapters, slices, starts."""
    agg = _aggregate(seed)
    for j in range(40):
        r = RequestRecord(f"x{seed}-{j}", f"v{j % 2}", "m0", bucket="b0", sent=1.0 + j * 0.01)
        r.priority_class, r.adapter, r.cold = ("hi", "lora-a", "cold") if j % 2 else ("lo", "", "")
        r.chunk_times.extend([r.sent + 0.05, r.sent + 0.07])
        r.chunk_tokens.extend([1, 2])
        r.done, r.output_tokens, r.prompt_tokens = r.sent + 0.08, 3, 20
        agg.add(r, 1000.0 + j * 0.01)
    return agg.to_wire()


def _merge_aggregate(wires: list[dict[str, Any]], pure: bool) -> tuple[Any, Any]:
    """An Aggregate after merging `wires` in turn (LOADGEN_PURE_PYTHON as `pure`): the error, and its wire form."""
    return _merged(Aggregate(), wires, pure)


def _corrupt_row(field: str, at: int, row: Any) -> Any:
    def corrupt(w: dict[str, Any]) -> dict[str, Any]:
        rows = list(w[field])
        rows[at] = row(rows[at]) if callable(row) else row
        return {**w, field: rows}

    return corrupt


@pytest.mark.parametrize(
    ("corrupt", "accepted"),
    [
        (lambda w: w, True),
        (_corrupt_row("groups", 1, lambda r: tuple(r)), True),  # a row that is no list: the Python path reads it
        (_corrupt_row("groups", 1, lambda r: r[:2]), False),  # too short
        (_corrupt_row("groups", 1, lambda r: [*r[:2], "x", r[2]]), False),  # too long
        (_corrupt_row("groups", 2, lambda r: [r[0], ["unhashable"], r[2]]), False),
        (_corrupt_row("groups", 0, lambda r: [r[0], r[1], [r[2]]]), False),  # its wire no dict
        (_corrupt_row("groups", 2, lambda r: [r[0], r[1], {**r[2], "requests": "x"}]), False),  # a field Python rejects
        (_corrupt_row("groups", 2, lambda r: [r[0], r[1], {**r[2], "hists": "x"}]), False),  # a form handed back whole
        (_corrupt_row("groups", 1, lambda r: [r[0], "new-mix", r[2]]), True),  # a group not seen yet
        (_corrupt_row("buckets", 0, lambda r: [r[-1]]), True),  # a slice's key may be of any length
        (_corrupt_row("buckets", 1, 7), False),
        (_corrupt_row("starts", 0, lambda r: [r[0], r[-1]]), False),  # a start's key is (variant, state)
        (_corrupt_row("classes", 0, lambda r: [r[0], r[1], {**r[2], "hists": {"ttft": b"not a histogram"}}]), False),
        (_corrupt_row("adapters", 0, lambda r: [r[0], r[1], {**r[2], "alias": "icl"}]), False),
        (lambda w: {**w, "groups": tuple(w["groups"])}, True),  # rows that are no list: the Python path reads them
        (lambda w: {**w, "buckets": None}, False),
    ],
)
def test_rows_merged_in_one_c_call_equal_the_python_path(corrupt: Any, accepted: bool) -> None:
    """`merge_rows` (a delta's groups, classes, adapters, slices and starts, each kind in one C call) against the
    Python path, row by row: well-formed rows, rows it leaves whole to the Python path (no list, a key of the wrong
    length or unhashable, a wire that is no dict or holds a form it does not read) and fields the Python path rejects —
    the same aggregate after, and the same error."""
    wires = [_rich_wire(1), corrupt(_rich_wire(2)), _rich_wire(3)]
    assert all(wires[0][k] for k in ("groups", "classes", "adapters", "buckets", "starts"))
    c, py = _merge_aggregate(wires, pure=False), _merge_aggregate(wires, pure=True)
    assert c == py
    assert (c[0] is None) == accepted, c[0]


def test_a_row_left_with_a_histogram_of_another_layout_is_finished_in_python() -> None:
    from loadgen.measure.group_stats import GroupStats, merge_group_rows
    from loadgen.measure.histogram import LatencyHistogram

    wire = _rich_wire(4)
    rows = copy.deepcopy(wire["groups"])
    into: dict[Any, GroupStats] = {}
    odd = into[(rows[0][0], rows[0][1])] = GroupStats()
    odd.hists["e2e"] = LatencyHistogram(digits=2)  # not the C call's layout: handed back with the row's items
    merge_group_rows(into, rows)
    expected = Aggregate()
    expected.merge_wire(copy.deepcopy(wire))
    assert odd.hists["e2e"].count == expected.groups[(rows[0][0], rows[0][1])].hists["e2e"].count > 0
    assert odd.requests == expected.groups[(rows[0][0], rows[0][1])].requests > 0
    assert {k: g.to_wire() for k, g in into.items() if k != (rows[0][0], rows[0][1])} == {
        k: g.to_wire() for k, g in expected.groups.items() if k != (rows[0][0], rows[0][1])
    }
