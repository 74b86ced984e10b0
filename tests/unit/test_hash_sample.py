"""The hash-sampling rule, written once (loadgen/measure/hash_sample.py) for the paired latencies, the reply texts and
the latency fit's rows: the kept set is every key seen under the final threshold whatever the order samples merge in,
a worker's level never exceeds the master's, and variants that saw the same keys keep the same ones.

Properties over generated runs (hypothesis, `derandomize`: the same examples on every run)."""

from __future__ import annotations

import functools
import random
from array import array
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.measure import hash_sample
from loadgen.measure.hash_sample import BITS, Rows, RowSample, key_hash, pack, survivors
from loadgen.measure.latency_samples import LatencySamples
from loadgen.measure.outputs import OutputSamples
from loadgen.measure.pairs import PairSamples, pair_hash
from loadgen.report.combine import _text

_PROPS = settings(derandomize=True, max_examples=40, deadline=None)


class _Keys(RowSample):
    """A sample of keys `k{n}`: each row the key's n and its hash mod 1000 (two columns)."""

    __slots__ = ()

    def __init__(self, cap: int) -> None:
        super().__init__(cap, 2)

    def add(self, variant: str, key: int) -> None:
        h = _hash(key)
        rows = self.admit(variant, h)
        if rows is not None:
            rows.keys.append(h)
            rows.columns[0].append(key)
            rows.columns[1].append(h % 1000)

    def to_wire(self) -> dict[str, Any]:
        return {"level": self.level, "rows": self.rows_wire()}

    def merge_wire(self, wire: dict[str, Any]) -> None:
        self.merge_rows_wire(wire["level"], wire["rows"])

    def kept(self, variant: str) -> set[int]:
        r = self.variants.get(variant)
        return set() if r is None else set(r.columns[0])


@functools.cache
def _hash(k: int) -> int:
    return key_hash(f"k{k}")


def _truth(keys_by_variant: dict[str, set[int]], cap: int) -> tuple[int, dict[str, set[int]]]:
    """The lowest level at which no variant keeps more than `cap` of its keys, and the keys each keeps there: counted
    afresh from every key, with none of the sample's bookkeeping."""
    hashes = {v: {k: _hash(k) for k in ks} for v, ks in keys_by_variant.items()}

    def over(level: int) -> bool:
        return any(sum(h < 2 ** (BITS - level) for h in hs.values()) > cap for hs in hashes.values())

    level = next(L for L in range(BITS + 1) if not over(L))
    return level, {v: {k for k, h in hs.items() if h < 2 ** (BITS - level)} for v, hs in hashes.items()}


def test_a_key_survives_the_levels_under_its_bound_and_the_hash_is_blake2b_of_63_bits() -> None:
    s = _Keys(cap=10)
    for level in (0, 1, 5, 62):
        s.level = level
        assert s.wants(2 ** (BITS - level) - 1) and not s.wants(2 ** (BITS - level))
    assert 0 <= key_hash("7-3-3") < 2**63 and key_hash("7-3-3") == pair_hash("7-3-3") == 676_399_098_188_020_498
    assert survivors([1, 2**61, 3], 1) is None and survivors([1, 2**62, 3], 1) == [0, 2]
    assert survivors([], 40) is None
    assert s.weight == 2**62


def test_rows_keep_their_values_with_their_keys_at_every_width() -> None:
    r = Rows(2, 3)

    def packed(*values: list[int]) -> list[npt.NDArray[np.int64]]:
        return [np.array(v, dtype=np.int64) for v in values]

    r.extend_packed(*packed([2**62, 5, 2**61]), packed([1, 2, 3, 4, 5, 6, 7, 8, 9], [0, 0, 0, 1, 1, 1, 2, 2, 2]), None)
    only_second = np.array([False, True])
    r.extend_packed(*packed([2**62 + 1, 6]), packed([10, 11, 12, 13, 14, 15], [3, 3, 3, 4, 4, 4]), only_second)
    r.keep_from(1)
    assert list(r.keys) == [5, 2**61, 6]
    assert [list(c) for c in r.columns] == [[4, 5, 6, 7, 8, 9, 13, 14, 15], [1, 1, 1, 2, 2, 2, 4, 4, 4]]
    r.clear()
    assert not r.keys and all(not c for c in r.columns)


_run = st.tuples(
    st.integers(3, 60),  # cap
    st.integers(1, 4),  # workers
    st.integers(0, 2**32),  # seed: which worker adds each key, when deltas ship, the merge orders
    st.lists(st.integers(0, 1500), min_size=1, max_size=3),  # keys per variant: how far each variant got
)


def _workers(cap: int, n_workers: int, rng: random.Random, counts: list[int]) -> tuple[list[_Keys], list[Any]]:
    """Workers that add every variant's keys in a shuffled order and ship deltas now and then, as plain data."""
    workers = [_Keys(cap) for _ in range(n_workers)]
    adds = [(f"v{j}", k) for j, n in enumerate(counts) for k in range(n)]
    rng.shuffle(adds)
    deltas: list[Any] = []
    for variant, k in adds:
        w = workers[rng.randrange(n_workers)]
        w.add(variant, k)
        if rng.random() < 0.02:
            deltas.append(orjson.loads(orjson.dumps(w.to_wire(), default=_text)))
            w.clear_rows()
    deltas += [orjson.loads(orjson.dumps(w.to_wire(), default=_text)) for w in workers]
    return workers, deltas


@_PROPS
@given(_run)
def test_the_kept_set_is_every_key_under_the_final_threshold_whatever_the_merge_order(run: Any) -> None:
    cap, n_workers, seed, counts = run
    rng = random.Random(seed)
    _, deltas = _workers(cap, n_workers, rng, counts)
    level, expected = _truth({f"v{j}": set(range(n)) for j, n in enumerate(counts)}, cap)
    alone = _Keys(cap)  # one sample that added every key itself
    for j, n in enumerate(counts):
        for k in range(n):
            alone.add(f"v{j}", k)
    outcomes = [(alone.level, {v: alone.kept(v) for v in expected})]
    for _ in range(3):
        rng.shuffle(deltas)
        master = _Keys(cap)
        for d in deltas:
            master.merge_wire(d)
        outcomes.append((master.level, {v: master.kept(v) for v in expected}))
        # Merged as a tree (two halves, then the halves together): the same.
        halves = [_Keys(cap), _Keys(cap)]
        for i, d in enumerate(deltas):
            halves[i % 2].merge_wire(d)
        halves[0].merge_wire(halves[1].to_wire())
        outcomes.append((halves[0].level, {v: halves[0].kept(v) for v in expected}))
    assert all(o == (level, expected) for o in outcomes)
    assert all(len(ks) <= cap for ks in expected.values())


@_PROPS
@given(_run)
def test_a_workers_level_never_exceeds_the_masters(run: Any) -> None:
    cap, n_workers, seed, counts = run
    rng = random.Random(seed)
    workers = [_Keys(cap) for _ in range(n_workers)]
    master = _Keys(cap)
    added: dict[str, set[int]] = {f"v{j}": set() for j in range(len(counts))}
    adds = [(f"v{j}", k) for j, n in enumerate(counts) for k in range(n)]
    rng.shuffle(adds)
    for variant, k in adds:
        w = workers[rng.randrange(n_workers)]
        w.add(variant, k)
        added[variant].add(k)
        # Whenever it looks: every worker's level is at most what the master reaches once all keys so far are in.
        if rng.random() < 0.05:
            truth, _ = _truth(added, cap)
            assert all(x.level <= truth for x in workers)
            master.merge_wire(w.to_wire())
            w.clear_rows()
            assert w.level <= master.level <= truth
    for w in workers:
        master.merge_wire(w.to_wire())
    assert max(w.level for w in workers) <= master.level == _truth(added, cap)[0]


@_PROPS
@given(_run)
def test_the_same_keys_survive_in_every_variant(run: Any) -> None:
    cap, n_workers, seed, counts = run
    rng = random.Random(seed)
    counts = [max(counts), *counts]  # v0 got furthest; every other variant saw a prefix of its keys
    _, deltas = _workers(cap, n_workers, rng, counts)
    master = _Keys(cap)
    for d in deltas:
        master.merge_wire(d)
    first = master.kept("v0")
    for j, n in enumerate(counts):
        # One level for all variants: a variant keeps exactly the furthest one's kept keys that it saw.
        assert master.kept(f"v{j}") == {k for k in first if k < n}


class _Wide(RowSample):
    """Keys `k{n}` with three values a row (width 3) in one column."""

    __slots__ = ()

    def __init__(self, cap: int) -> None:
        super().__init__(cap, 1, 3)

    def add(self, variant: str, key: int) -> None:
        h = _hash(key)
        rows = self.admit(variant, h)
        if rows is not None:
            rows.keys.append(h)
            rows.columns[0].extend([key, -key, h % 97])


def _state(s: RowSample) -> tuple[Any, ...]:
    counts = {v: (list(c.seen), c.kept) for v, c in s._counts.items()}
    rows = {v: (list(r.keys), [list(c) for c in r.columns]) for v, r in s.variants.items()}
    return s.level, counts, rows


@_PROPS
@given(_run, st.booleans(), st.booleans())
def test_small_rows_merge_without_numpy_as_they_do_with_it(run: Any, wide: bool, as_json: bool) -> None:
    # A variant's rows up to SMALL_ROWS take Python's path (`extend_words`), more take numpy's: the same sample
    # either way, for deltas of every size (most of a run's are small, its first and last may not be), as msgpack
    # carries them (raw bytes) and as aggregate.json holds them (base64 text).
    cap, n_workers, seed, counts = run
    rng = random.Random(seed)
    kind = _Wide if wide else _Keys
    workers = [kind(cap) for _ in range(n_workers)]
    deltas: list[Any] = []
    for variant, k in [(f"v{j}", k) for j, n in enumerate(counts) for k in range(n)]:
        w = workers[rng.randrange(n_workers)]
        w.add(variant, k)
        if rng.random() < 0.03:
            deltas.append(w.to_wire())
            w.clear_rows()
    deltas += [w.to_wire() for w in workers]
    if as_json:
        deltas = [orjson.loads(orjson.dumps(d, default=_text)) for d in deltas]
    ends = []
    # numpy's path, Python's loop (LOADGEN_PURE_PYTHON), and the C call (`_hist_merge.admit_rows`; base64 text it
    # leaves to the others).
    for small, pure in ((0, "1"), (10**9, "1"), (0, "")):
        master = kind(cap)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(hash_sample, "SMALL_ROWS", small)
            mp.setenv("LOADGEN_PURE_PYTHON", pure)
            for d in deltas:
                RowSample.merge_rows_wire(master, d["level"], d.get("rows", d.get("columns", ())))
        ends.append(_state(master))
    assert ends[0] == ends[1] == ends[2]
    assert bool(ends[0][2]) == (sum(counts) > 0)  # (rows were merged: not two empty samples compared)


_GOOD = pack(array("q", [5, 1 << 60]))
_COL = pack(array("q", [1, 2]))  # (a `_Keys` row has two columns)


@pytest.mark.parametrize(
    ("keys", "columns", "error"),
    [
        (pack(array("q", [5, -1])), [_COL, _COL], "a key hash below 0"),
        (_GOOD[:-1], [_COL, _COL], "not whole int64 values"),
        (_GOOD, [_COL, pack(array("q", [1]))], "columns of 2 values"),
        (_GOOD, [_COL], "columns of 2 values"),
        (_GOOD, [_COL, b"xx"], "not whole int64 values"),
        (7, [_COL, _COL], "packed int64 values, not int"),
        ("abc", [_COL, _COL], "not base64"),
    ],
)
def test_corrupt_rows_meet_the_same_error_with_the_c_call_and_without(
    keys: Any, columns: list[Any], error: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `admit_rows` leaves (it changes nothing) the Python path rejects: the same error, the same state, the
    variant's good rows before it kept."""
    ends = []
    for pure in ("", "1"):
        monkeypatch.setenv("LOADGEN_PURE_PYTHON", pure)
        s = _Keys(cap=10)
        with pytest.raises(ValueError, match=error):
            s.merge_rows_wire(0, [["v0", _GOOD, _COL, pack(array("q", [7, 8]))], ["v1", keys, *columns]])
        ends.append(_state(s))
    assert ends[0] == ends[1] and ends[0][2]["v0"] == ([5, 1 << 60], [[1, 2], [7, 8]])


def test_a_worker_keeps_its_level_and_counts_after_shipping_and_the_level_only_rises() -> None:
    w = _Keys(cap=50)
    levels = []
    for k in range(5000):
        w.add("a", k)
        if k % 100 == 99:
            levels.append(w.level)
            w.clear_rows()
            assert w.rows_empty()
    assert levels == sorted(levels) and levels[-1] == _truth({"a": set(range(5000))}, 50)[0]


def test_the_three_samples_keep_by_the_one_rule() -> None:
    """Pairs, texts and latency rows are `HashSample`s: the level test, counts and settling are the shared ones."""
    for sample in (PairSamples(cap=7), OutputSamples(cap=7), LatencySamples(cap=7)):
        sample.level = 3
        assert sample.wants(2**60 - 1) and not sample.wants(2**60) and sample.weight == 8
