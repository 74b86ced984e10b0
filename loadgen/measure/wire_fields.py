"""The master's merge of a stats object's wire form (a group's, a slice's), `merge_stats`: its histograms' targets
(`wire_items_python`), their merge, and its counters and counts added into the object's fields (`add_fields`), in
one C call where built (`_hist_merge.merge_stats`: no Python per histogram or per field). The master merges every
worker's every group and slice; at 1,000 workers a final merge is 110,000 of them, and the Python loops over their
fields were a third of its time (`python -m bench.merge`). The Python paths here are what the C must equal
(tests/unit/test_wire_fields.py holds both equal, errors included; it calls the C parts, `_hist_merge.wire_items`
and `add_fields`, on their own too).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from loadgen.measure.hist_merge import merge_encoded_many, merge_encoded_rest
from loadgen.measure.histogram import LatencyHistogram
from loadgen.pure_python import pure_python

__all__ = [
    "COUNTER",
    "COUNTS",
    "add_counts",
    "add_fields",
    "add_fields_python",
    "merge_rows",
    "merge_stats",
    "wire_items_python",
]

try:  # optional, as every C half is
    from loadgen.measure import _hist_merge as _native
except ImportError:  # pragma: no cover - a build without a C compiler or zlib's headers
    _native = None  # type: ignore[assignment]  # (a C build may be absent)

# What a field of a wire form is (`kinds`): a counter (added as int) or a dict of counts by class.
COUNTER, COUNTS = 0, 1


def add_counts(into: dict[str, int], other: dict[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def add_fields_python(obj: object, w: Mapping[str, Any], kinds: Mapping[str, int]) -> None:
    """Each field of `w` that `kinds` names and that is not empty, in the wire's order: a counter added as
    `int(value)`, counts added class by class."""
    for name, v in w.items():
        kind = kinds.get(name)
        if kind is None or not v:
            continue
        if kind == COUNTER:
            setattr(obj, name, getattr(obj, name) + int(v))
        else:
            add_counts(getattr(obj, name), v)


def add_fields(obj: object, w: Mapping[str, Any], kinds: dict[str, int]) -> None:
    """`add_fields_python`, in one C call where built."""
    if _native is None or type(w) is not dict or pure_python():
        add_fields_python(obj, w, kinds)
    else:
        _native.add_fields(obj, w, kinds, add_counts)


def wire_items_python(
    targets: dict[str, Any], hists: Mapping[str, Any], alias: Mapping[str, str] | None, make: Callable[[str], Any]
) -> list[tuple[Any, Any]]:
    """(blob, (histogram,)) per metric of `hists`, the histogram `targets[metric]` (`make(metric)` creates it);
    with an `alias` (a metric -> the metric whose blob it shares, `GroupStats.to_wire`), (blob, [histogram and its
    aliases']), the blob decoded once for all of them."""

    def hist(m: str) -> Any:
        h = targets.get(m)
        return make(m) if h is None else h

    if alias:
        shared = {m: [hist(m)] for m in hists}
        for a, src in alias.items():
            to = shared.get(src)
            if to is not None:
                to.append(hist(a))
        return [(blob, shared[m]) for m, blob in hists.items()]
    return [(blob, (hist(m),)) for m, blob in hists.items()]


@functools.cache
def _layout() -> Any:
    """The layout a stats object's histograms have (every `LatencyHistogram()`): the one `merge_stats`'s C call reads
    straight into; a histogram of another is handed back and merged as `merge_encoded_into` maps it. Made at the
    first merge, not at import (importing does no work: tests/unit/test_histogram.py)."""
    return LatencyHistogram()._lay


def merge_stats(obj: Any, w: dict[str, Any], kinds: dict[str, int], make: Callable[[str], Any], alias: bool) -> None:
    """A group's or a slice's wire form into it: its histograms (`w["hists"]`, shared through `w["alias"]` where
    `alias`) into `obj.hists`, then its fields (`add_fields`) — in one C call where built (`_hist_merge.merge_stats`),
    which hands back a histogram it leaves, as `merge_encoded_many` does, or the whole wire for a form it does not
    read; the same as `merge_encoded_many(wire_items_python(...))` then `add_fields`."""
    if _native is not None and type(w) is dict and not pure_python():
        lay = _layout()
        got = _native.merge_stats(obj, w, kinds, add_counts, make, alias, lay, *lay.merge_args())
        if got is None:
            return
        if got is not False:
            items, left = got
            merge_encoded_rest(items, left)
            add_fields(obj, w, kinds)
            return
    # (Where the C call handed the wire back whole, its histograms are a form only Python reads, or rejects.)
    merge_encoded_many(wire_items_python(obj.hists, w.get("hists", {}), w.get("alias") if alias else None, make))
    add_fields(obj, w, kinds)


def merge_rows(
    into: dict[Any, Any],
    rows: Any,
    nkey: int,
    new: Callable[[], Any],
    kinds: dict[str, int],
    alias: bool,
    merge_one: Callable[[Any], None],
) -> None:
    """Wire rows `[*key, wire]` (a map of groups' or of slices' wire form), each merged into `into[tuple(key)]`
    (`new()` made and stored where absent) as `merge_stats` merges it; `nkey`: the key's length (-1: any). Where built,
    one C call for all the rows (`_hist_merge.merge_rows`: no Python per row), which leaves a row it does not read
    whole to `merge_one(row)` — the caller's Python path for one row, which the C must equal — or, as `merge_stats`
    does, a histogram it hands back."""
    if _native is None or type(rows) is not list or pure_python():
        for row in rows:
            merge_one(row)
        return
    lay = _layout()
    args = (new, kinds, add_counts, alias, lay, *lay.merge_args())
    start = 0
    while True:
        at, items, left = _native.merge_rows(into, rows, start, nkey, *args)
        if at < 0:
            return
        row = rows[at]
        if items is None or left is None:  # (both or neither)
            merge_one(row)
        else:  # its histograms merged up to `left`, which the C call hands back (another layout, a window to grow)
            merge_encoded_rest(items, left)
            add_fields(into[tuple(row[:-1])], row[-1], kinds)
        start = at + 1
