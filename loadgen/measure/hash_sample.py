"""Bounded hash sampling: the one rule by which the paired latencies (measure/pairs.py), the reply texts
(measure/outputs.py) and the latency fit's rows (measure/latency_samples.py) keep a bounded, seeded sample.

A key's 63-bit hash `h` (`key_hash`) survives at level L when `h < 2**(63 - L)`; the level is the lowest at which no
variant keeps more than `cap` keys, and only ever rises. The rule depends on the key alone, so variants whose keys name
the same requests keep the same ones (pairs survive), and the kept set is the same whatever the order samples merge
in: it is every key seen whose hash is under the final threshold.

Counts: per variant, the keys added since the run began, by the highest level each survives at; only the counts at
the current level and above are exact (keys under it were not counted once it rose past them), and only those decide
a rise. A worker keeps a level of its own (its keys are a subset of the master's, so its level is never above the
master's) and ships only the keys above it, then forgets its rows (`clear_rows`) but keeps its level and counts, so
that the level goes on rising as the run's keys add up: over a run of n keys a variant's worker ships about
cap x (1 + log2(n / cap) / 2) of them (cap before the level first rises, then about cap / 2 per level), not n.

`HashSample` holds the level, the cap and the counts; a sample subclasses it and holds its rows, dropping those under
a risen level in `_keep_from`. `RowSample` is that for rows of integers kept in arrays (`Rows`: no object per key),
shipped packed (`pack` / `words`: little-endian int64, raw; base64 text in JSON): the master reads a worker's rows
with no Python object per value and keeps the survivors of its level in one C call per variant where built
(`_hist_merge.admit_rows`, raw rows), else in one vectorised step (a variant's few rows, `SMALL_ROWS` or fewer, in a
Python loop: numpy's per-call cost would be most of their merge); tests/unit/test_hash_sample.py holds the three equal.
"""

from __future__ import annotations

import binascii
import hashlib
import sys
from array import array
from collections.abc import Sequence
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from loadgen.pure_python import pure_python

try:  # the master's merge of a variant's packed rows in one C call; optional, as every C half is
    from loadgen.measure import _hist_merge as _native
except ImportError:  # pragma: no cover - a build without a C compiler or zlib's headers
    _native = None  # type: ignore[assignment]  # (a C build may be absent)

__all__ = ["BITS", "HashSample", "RowSample", "Rows", "key_hash", "pack", "survivors", "words"]

BITS = 63
# A variant's rows up to this many merge without numpy (`Rows.extend_words`): a numpy call costs ~1 µs whatever its
# size, and a worker's final delta holds a few rows a variant (bench.merge's final merge: 8).
SMALL_ROWS = 64
# 2**0 … 2**62: a key's bit length is how many of these are <= it (`np.searchsorted`, exact on int64).
_POWERS = np.array([1 << j for j in range(BITS)], dtype=np.int64)
_LITTLE = sys.byteorder == "little"


def pack(values: array[int]) -> bytearray:
    """An array of int64 on the wire: its values as little-endian int64, raw (msgpack carries them as bin). A
    `bytearray`, so that a JSON writer tells them from the histograms' base64 `bytes` and writes them as base64 text
    (report/combine.py `_text`), which `words` reads back."""
    if not _LITTLE:  # pragma: no cover - every platform loadgen runs on is little-endian
        values = array("q", values)
        values.byteswap()
    return bytearray(values)


def words(packed: bytes | bytearray | str, what: str = "rows") -> memoryview:
    """`pack`'s form back as int64 values over the same bytes (a memoryview of them): raw bytes, or base64 text
    (JSON)."""
    if isinstance(packed, str):
        try:
            packed = binascii.a2b_base64(packed)
        except (binascii.Error, ValueError) as e:
            raise ValueError(f"{what}: not base64 ({e})") from None
    if not isinstance(packed, bytes | bytearray | memoryview):
        raise ValueError(f"{what}: packed int64 values, not {type(packed).__name__}")
    if len(packed) % 8:
        raise ValueError(f"{what}: {len(packed)} bytes, not whole int64 values")
    return memoryview(packed).cast("B").cast("q")


def _bit_lengths(keys: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
    return np.searchsorted(_POWERS, keys, side="right")


def key_hash(key: str) -> int:
    """63 bits of BLAKE2b: the same on every worker and run (Python's `hash` of a str is salted per process), and
    collisions among 50k keys have a chance of ~1e-10."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") >> (64 - BITS)


def survivors(keys: Sequence[int], level: int) -> list[int] | None:
    """The positions of the keys that survive `level`; None when all of them do (the usual case: nothing to copy)."""
    top = 1 << (BITS - level)
    if not keys or max(keys) < top:
        return None
    return [i for i, h in enumerate(keys) if h < top]


class _Counts:
    """One variant's keys added since the run began, by the highest level each survives at (`seen`), and of those
    the ones the current level keeps (`kept`: on a worker, also those shipped already)."""

    __slots__ = ("seen", "kept")

    def __init__(self) -> None:
        self.seen = [0] * (BITS + 1)
        self.kept = 0


class HashSample:
    """The level, the cap and the per-variant counts of a hash-sampled sample; subclasses hold the rows."""

    __slots__ = ("level", "cap", "_counts")

    def __init__(self, cap: int) -> None:
        self.level = 0
        self.cap = cap
        self._counts: dict[str, _Counts] = {}

    def wants(self, h: int) -> bool:
        """Whether a key that hashes to `h` would be kept now."""
        return BITS - h.bit_length() >= self.level

    @property
    def weight(self) -> int:
        """How many keys each kept one stands for."""
        return 1 << self.level

    def _counts_of(self, variant: str) -> _Counts:
        c = self._counts.get(variant)
        if c is None:
            c = self._counts[variant] = _Counts()
        return c

    def _admit(self, variant: str, h: int) -> bool:
        """Count a key of `variant`, settling the level when the variant then keeps more than `cap`: whether the
        caller is to keep its row (it survives the level, risen or not)."""
        z = BITS - h.bit_length()
        if z < self.level:
            return False
        c = self._counts_of(variant)
        c.seen[z] += 1
        c.kept += 1
        if c.kept > self.cap:
            self._settle()
            return z >= self.level
        return True

    def _admit_wire(self, variant: str, keys: Sequence[int]) -> list[int] | None:
        """Count the keys of a variant shipped by another sample (after `_rise_to` its level): the positions of those
        that survive, None when all do. The caller adds those rows, then `_settle`s once the whole wire is in."""
        rows = survivors(keys, self.level)
        kept = keys if rows is None else [keys[i] for i in rows]
        c = self._counts_of(variant)
        seen = c.seen
        for h in kept:
            seen[BITS - h.bit_length()] += 1
        c.kept += len(kept)
        return rows

    def _admit_packed(self, variant: str, keys: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_] | None:
        """`_admit_wire` for packed keys: the mask of those that survive, None when all do."""
        mask: npt.NDArray[np.bool_] | None = None
        if len(keys) and int(keys.max()) >= 1 << (BITS - self.level):
            mask = keys < 1 << (BITS - self.level)
            keys = keys[mask]
        c = self._counts_of(variant)
        if len(keys):
            by_level = np.bincount(BITS - _bit_lengths(keys), minlength=BITS + 1)
            seen = c.seen
            for z in np.flatnonzero(by_level).tolist():
                seen[z] += int(by_level[z])
        c.kept += len(keys)
        return mask

    def _settle(self) -> None:
        """Raise the level until no variant keeps more than `cap` keys, and drop what falls under it."""
        level, cap = self.level, self.cap
        while level < BITS and any(sum(c.seen[level:]) > cap for c in self._counts.values()):
            level += 1
        if not self._rise_to(level):  # `kept` caches sum(seen[level:]): afresh, should the level have been set by hand
            for c in self._counts.values():
                c.kept = sum(c.seen[level:])

    def _rise_to(self, level: int) -> bool:
        """The level of a wire merged in (or settled at), when above this one: the rows under it go."""
        if level <= self.level:
            return False
        self.level = level
        for c in self._counts.values():
            c.kept = sum(c.seen[level:])
        self._keep_from(level)
        return True

    def _keep_from(self, level: int) -> None:
        """Drop the rows whose keys do not survive `level`."""
        raise NotImplementedError


class Rows:
    """One variant's kept keys and their values: `len(columns)` arrays of `width` values per key, row-major."""

    __slots__ = ("keys", "columns", "width")

    def __init__(self, columns: int, width: int = 1) -> None:
        self.keys = array("q")
        self.columns = [array("q") for _ in range(columns)]
        self.width = width

    def keep_from(self, level: int) -> None:
        if not self.keys:
            return
        keys = np.frombuffer(self.keys, dtype=np.int64)
        top = 1 << (BITS - level)
        if int(keys.max()) < top:
            return
        mask = keys < top
        self.keys = _array(keys[mask])
        w = self.width
        self.columns = [_array(_take(np.frombuffer(col, dtype=np.int64), mask, w)) for col in self.columns]

    def extend_packed(
        self, keys: npt.NDArray[np.int64], columns: Sequence[npt.NDArray[np.int64]], mask: npt.NDArray[np.bool_] | None
    ) -> None:
        """Rows shipped packed (`words`, as int64 arrays); `mask`: the rows to take (None: all of them)."""
        w = self.width
        n = len(keys) * w
        if mask is not None:
            keys = keys[mask]
        self.keys.frombytes(keys.astype(np.int64, copy=False).tobytes())
        for mine, col in zip(self.columns, columns, strict=True):
            col = col[:n]
            if mask is not None:
                col = _take(col, mask, w)
            mine.frombytes(col.astype(np.int64, copy=False).tobytes())

    def extend_words(self, keys: memoryview, columns: Sequence[memoryview], rows: list[int] | None) -> None:
        """`extend_packed` for a few rows (`words`), with no numpy call; `rows`: the positions to take (None: all of
        them)."""
        w = self.width
        if rows is None:  # (frombytes wants the bytes: a memoryview of int64 cast back to them)
            self.keys.frombytes(keys.cast("B"))
            n = len(keys) * w
            for mine, col in zip(self.columns, columns, strict=True):
                mine.frombytes(col[:n].cast("B"))
            return
        self.keys.extend([keys[i] for i in rows])
        for mine, col in zip(self.columns, columns, strict=True):
            for i in rows:
                mine.frombytes(col[i * w : (i + 1) * w].cast("B"))

    def check_packed(
        self, keys: npt.NDArray[np.int64] | memoryview, columns: Sequence[npt.NDArray[np.int64] | memoryview]
    ) -> None:
        """That packed rows fit these: key hashes (63 bits, none below 0) and a value per column and key."""
        n = len(keys) * self.width
        if len(columns) != len(self.columns) or any(len(col) < n for col in columns):
            raise ValueError(f"rows: {len(keys)} keys need {len(self.columns)} columns of {n} values")
        if len(keys) and int(min(keys) if isinstance(keys, memoryview) else keys.min()) < 0:
            raise ValueError("rows: a key hash below 0")

    def clear(self) -> None:
        self.keys = array("q")
        self.columns = [array("q") for _ in self.columns]


def _take(col: npt.NDArray[np.int64], mask: npt.NDArray[np.bool_], width: int) -> npt.NDArray[np.int64]:
    """The values of the rows `mask` keeps, `width` per row."""
    return col[mask] if width == 1 else col.reshape(-1, width)[mask].reshape(-1)


def _array(values: npt.NDArray[np.int64]) -> array[int]:
    out = array("q")
    out.frombytes(values.astype(np.int64, copy=False).tobytes())
    return out


class RowSample(HashSample):
    """Variant -> `Rows` of `columns` arrays, `width` values per key; on the wire, [variant, keys, *columns] rows."""

    __slots__ = ("variants", "_shape")

    def __init__(self, cap: int, columns: int, width: int = 1) -> None:
        super().__init__(cap)
        self.variants: dict[str, Rows] = {}
        self._shape = (columns, width)

    def _rows(self, variant: str) -> Rows:
        r = self.variants.get(variant)
        if r is None:
            r = self.variants[variant] = Rows(*self._shape)
        return r

    def admit(self, variant: str, h: int) -> Rows | None:
        """The variant's rows, to append the row of a key that hashes to `h` to (its key and `width` values per
        column), or None when the level drops it."""
        return self._rows(variant) if self._admit(variant, h) else None

    def _keep_from(self, level: int) -> None:
        for r in self.variants.values():
            r.keep_from(level)

    def rows_empty(self) -> bool:
        return not any(r.keys for r in self.variants.values())

    def rows_wire(self) -> list[list[Any]]:
        """[variant, keys, *columns] per variant with rows, each array `pack`ed."""
        return [[v, pack(r.keys), *(pack(c) for c in r.columns)] for v, r in self.variants.items() if r.keys]

    def merge_rows_wire(self, level: int, rows: Sequence[Sequence[Any]]) -> None:
        """Another sample's `level` and `rows_wire()`."""
        self._rise_to(level)
        admit = None if _native is None or pure_python() else _native.admit_rows
        for variant, keys_text, *columns_text in rows:
            if admit is not None and self._admit_native(admit, variant, keys_text, columns_text):
                continue
            keys = words(keys_text, "row keys")
            columns = [words(c, "row values") for c in columns_text]
            mine = self._rows(variant)
            if len(keys) <= SMALL_ROWS:
                mine.check_packed(keys, columns)
                mine.extend_words(keys, columns, self._admit_wire(variant, keys))
            else:
                big = np.frombuffer(keys, dtype="<i8")
                cols = [np.frombuffer(c, dtype="<i8") for c in columns]
                mine.check_packed(big, cols)
                mine.extend_packed(big, cols, self._admit_packed(variant, big))
        self._settle()

    def _admit_native(self, admit: Any, variant: str, keys: Any, columns: list[Any]) -> bool:
        """A variant's raw rows kept and counted in one C call (`_hist_merge.admit_rows`): whether it took them (it
        leaves what the Python path must read or reject, having changed nothing)."""
        counts = self._counts.get(variant)
        seen = counts.seen if counts is not None else [0] * (BITS + 1)
        got = admit(keys, columns, *self._shape, self.level, seen)
        if got is None:
            return False
        mine = self._rows(variant)
        if counts is None:
            counts = self._counts[variant] = _Counts()
            counts.seen = seen
        kept, kept_keys, kept_columns = got
        counts.kept += kept
        mine.keys.frombytes(kept_keys)
        for col, values in zip(mine.columns, kept_columns, strict=True):
            col.frombytes(values)
        return True

    def is_empty(self) -> bool:
        return self.rows_empty()

    def to_wire(self) -> dict[str, Any]:
        return {"level": self.level, "columns": self.rows_wire()}

    def merge_wire(self, wire: dict[str, Any]) -> None:
        self.merge_rows_wire(int(wire.get("level", 0)), wire.get("columns", ()))

    def merge(self, other: Self) -> None:
        self.merge_wire(other.to_wire())

    def clear_rows(self) -> None:
        """A worker after shipping a delta: the rows go, the level and the counts of keys seen stay (so that the
        level goes on rising as the run's keys add up)."""
        for r in self.variants.values():
            r.clear()
