"""Per-request latencies keyed by the request's identity, for paired comparisons of variants.

Every variant replays the same seeded requests (closed loop: the k-th user of every variant replays stream
`worker_index * 100000 + slot`; open loop: arrival k is request k of stream 0), so the request (stream, index,
session turn) is the same prompt and length wherever it was sent. Its record id is
`{worker_tag}-{variant}-{stream}-{index}` (+ `-t{turn}` for a session's later turns): the key drops the worker tag
and the variant, which differ between the variants' copies of the request, and keeps the rest.

Bounded on the master and on the wire by hash sampling: a key's 63-bit hash `h` survives at level L when
`h < 2**(63 - L)`; the level is the lowest at which no variant keeps more than `cap` keys, and only ever rises. The
rule depends on the key alone, so the variants keep the same keys (pairs survive), and the kept set is the same
whatever the order reports merge in: it is every key seen whose hash is under the final threshold. A worker keeps a
level of its own (its keys are a subset of the master's, so its level is never above the master's) and ships only
keys above it: over a run of n requests a variant's worker ships about cap x (1 + log2(n / cap) / 2) keys (cap
before the level first rises, then about cap / 2 per level), not n.

The requests of the measured window are kept (no warm-up or cut-by-stop request), failed ones included: a failed
request is a censored sample (`CENSORED`), above every measured value, in TTFT when it failed before its first token
and in E2E always, as the report's percentiles count it — left out, a variant whose stalls end as timeouts would
drop exactly its worst requests from its paired p99. Values are integer microseconds; `NO_VALUE` (-1): the request
has no such value (TPOT of a reply in one chunk, or of a failed request: TPOT's percentiles count successes only).
A request's mean inter-token gap is its TPOT, so ITL has no column of its own.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import Any

from loadgen.measure.fates import FATES, FateRow, fate_of, latency
from loadgen.measure.records import RequestRecord

__all__ = ["CENSORED", "NO_VALUE", "PAIR_CAP", "PAIR_METRICS", "PairSamples", "pair_hash", "pair_key"]

PAIR_METRICS: tuple[str, ...] = ("ttft", "tpot", "e2e")
# Keys kept per variant at most: 640 KB of arrays per variant on the master; a p99 interval rests on ~200 values
# above it, a p50 one is within ~1 % at typical spreads; and the report's bootstrap of 10 variants at the cap takes
# ~0.5 s (at 50,000, ~1 s: build_report shares the 2 s budget for a report of 10 variants).
PAIR_CAP = 20_000
_BITS = 63
NO_VALUE = -1
CENSORED = -2


def pair_key(rec: RequestRecord) -> str | None:
    """`{stream}-{index}-{turn}` from the record's id, None when the id is not of the request-stream form."""
    rid = rec.request_id
    if rec.turn > 1:
        suffix = f"-t{rec.turn}"
        if not rid.endswith(suffix):
            return None
        rid = rid[: -len(suffix)]
    parts = rid.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return f"{parts[1]}-{parts[2]}-{rec.turn}"


def pair_hash(key: str) -> int:
    """63 bits of BLAKE2b: the same on every worker and run (Python's `hash` of a str is salted per process), and
    collisions among 50k keys have a chance of ~1e-10."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") >> (64 - _BITS)


def _zeros(h: int) -> int:
    """The highest level at which `h` survives."""
    return _BITS - h.bit_length()


def _us(seconds: float | None) -> int:
    return NO_VALUE if seconds is None else max(int(seconds * 1e6 + 0.5), 0)


def _row(rec: RequestRecord, row: FateRow) -> list[int]:
    """The record's values in `PAIR_METRICS` order, measured or censored as its fate's row says."""
    out = []
    for metric in PAIR_METRICS:
        value, censored = latency(rec, metric, row)
        out.append(CENSORED if censored else _us(value))
    return out


class _Column:
    """One variant's kept keys and their values, column by column (arrays: no object per value)."""

    __slots__ = ("keys", "values", "seen", "kept")

    def __init__(self) -> None:
        self.keys = array("q")
        self.values = {m: array("q") for m in PAIR_METRICS}
        # Keys added since the run began, by the highest level each survives at (`_zeros`); only the counts at the
        # current level and above are exact (keys under the level were not counted once it rose past them).
        self.seen = [0] * (_BITS + 1)
        # Of those, the ones the current level keeps: on a worker, also those shipped already.
        self.kept = 0

    def kept_at(self, level: int) -> int:
        return sum(self.seen[level:])

    def append(self, h: int, values: list[int]) -> None:
        self.keys.append(h)
        for m, v in zip(PAIR_METRICS, values, strict=True):
            self.values[m].append(v)
        self.seen[_zeros(h)] += 1
        self.kept += 1

    def extend(self, keys: list[int], values: list[list[int]]) -> None:
        """Many rows at once (a worker's delta): `values` column by column, in `PAIR_METRICS` order."""
        self.keys.extend(keys)
        for m, col in zip(PAIR_METRICS, values, strict=True):
            self.values[m].extend(col)
        seen = self.seen
        for h in keys:
            seen[_BITS - h.bit_length()] += 1
        self.kept += len(keys)

    def keep_from(self, level: int) -> None:
        self.kept = self.kept_at(level)
        top = 1 << (_BITS - level)
        rows = [i for i, h in enumerate(self.keys) if h < top]
        if len(rows) == len(self.keys):
            return
        self.keys = array("q", (self.keys[i] for i in rows))
        for m in PAIR_METRICS:
            col = self.values[m]
            self.values[m] = array("q", (col[i] for i in rows))


class PairSamples:
    """Variant -> kept keys and values; mergeable (`to_wire` / `merge_wire`, or `merge`)."""

    __slots__ = ("level", "cap", "columns")

    def __init__(self, cap: int = PAIR_CAP) -> None:
        self.level = 0
        self.cap = cap
        self.columns: dict[str, _Column] = {}

    def _column(self, variant: str) -> _Column:
        col = self.columns.get(variant)
        if col is None:
            col = self.columns[variant] = _Column()
        return col

    def add(self, rec: RequestRecord, row: FateRow | None = None) -> None:
        """A record, its values as its fate's row says (measure/fates.py; `row`: when the caller has it already)."""
        row = row or FATES[fate_of(rec)]
        if not row.pairs:
            return
        key = pair_key(rec)
        if key is None:
            return
        h = pair_hash(key)
        if _zeros(h) < self.level:
            return
        col = self._column(rec.variant)
        col.append(h, _row(rec, row))
        if col.kept > self.cap:
            self._settle()

    def _settle(self) -> None:
        """Raise the level until no variant keeps more than `cap` keys, and drop what falls under it."""
        level = self.level
        while level < _BITS and any(c.kept_at(level) > self.cap for c in self.columns.values()):
            level += 1
        if level != self.level:
            self.level = level
            for c in self.columns.values():
                c.keep_from(level)

    def is_empty(self) -> bool:
        return not any(c.keys for c in self.columns.values())

    def to_wire(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "columns": [
                [v, c.keys.tolist(), *(c.values[m].tolist() for m in PAIR_METRICS)]
                for v, c in self.columns.items()
                if c.keys
            ],
        }

    def clear_rows(self) -> None:
        """A worker after shipping a delta: the rows go, the level and the counts of keys seen stay (so that the
        level goes on rising as the run's keys add up)."""
        for c in self.columns.values():
            c.keys = array("q")
            c.values = {m: array("q") for m in PAIR_METRICS}

    def merge_wire(self, wire: dict[str, Any]) -> None:
        level = int(wire.get("level", 0))
        if level > self.level:
            self.level = level
            for c in self.columns.values():
                c.keep_from(level)
        top = 1 << (_BITS - self.level)
        for variant, keys, *values in wire.get("columns", ()):
            rows = [i for i, h in enumerate(keys) if h < top]
            if len(rows) < len(keys):
                keys = [keys[i] for i in rows]
                values = [[col[i] for i in rows] for col in values]
            self._column(variant).extend(keys, values)
        self._settle()

    def merge(self, other: PairSamples) -> None:
        self.merge_wire(other.to_wire())

    def samples(self, variant: str) -> tuple[array[int], dict[str, array[int]]]:
        """The variant's kept keys and, per metric, its values (µs; `NO_VALUE`: none; `CENSORED`: failed), row for
        row."""
        col = self.columns.get(variant) or _Column()
        return col.keys, col.values
