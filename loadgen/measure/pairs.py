"""Per-request latencies keyed by the request's identity, for paired comparisons of variants.

Every variant replays the same seeded requests (closed loop: the k-th user of every variant replays stream
`worker_index * 100000 + slot`; open loop: arrival k is request k of stream 0), so the request (stream, index,
session turn) is the same prompt and length wherever it was sent. Its record id is
`{worker_tag}-{variant}-{stream}-{index}` (+ `-t{turn}` for a session's later turns): the key drops the worker tag
and the variant, which differ between the variants' copies of the request, and keeps the rest.

Bounded on the master and on the wire by hash sampling (measure/hash_sample.py): the rule depends on the key alone,
so the variants keep the same keys (pairs survive), whatever the order reports merge in, and a worker ships about
cap x (1 + log2(n / cap) / 2) keys per variant over a run of n requests, not n.

The requests of the measured window are kept (no warm-up or cut-by-stop request), failed ones included: a failed
request is a censored sample (`CENSORED`), above every measured value, in TTFT when it failed before its first token
and in E2E always, as the report's percentiles count it — left out, a variant whose stalls end as timeouts would
drop exactly its worst requests from its paired p99. Values are integer microseconds; `NO_VALUE` (-1): the request
has no such value (TPOT of a reply in one chunk, or of a failed request: TPOT's percentiles count successes only).
A request's mean inter-token gap is its TPOT, so ITL has no column of its own.
"""

from __future__ import annotations

from array import array

from loadgen.measure.fates import FATES, RECORDED_METRICS, FateRow, LatencyPlan, fate_of, latencies
from loadgen.measure.hash_sample import Rows, RowSample
from loadgen.measure.hash_sample import key_hash as pair_hash
from loadgen.measure.records import RequestRecord

__all__ = ["CENSORED", "NO_VALUE", "PAIR_CAP", "PAIR_METRICS", "PairSamples", "pair_hash", "pair_key"]

PAIR_METRICS: tuple[str, ...] = ("ttft", "tpot", "e2e")
# Keys kept per variant at most: 640 KB of arrays per variant on the master; a p99 interval rests on ~200 values
# above it, a p50 one is within ~1 % at typical spreads; and the report's bootstrap of 10 variants at the cap takes
# ~0.5 s (at 50,000, ~1 s: build_report shares the 2 s budget for a report of 10 variants).
PAIR_CAP = 20_000
NO_VALUE = -1
CENSORED = -2


def split_id(rec: RequestRecord) -> tuple[str, str] | None:
    """(the record's id without its session-turn and sub-agent suffixes, its agent sub-agent path: "" for none) from
    `{…}-{index}[-b{path}][-t{turn}]`; None when the id does not end with the record's own turn."""
    rid = rec.request_id
    if rec.turn > 1:
        suffix = f"-t{rec.turn}"
        if not rid.endswith(suffix):
            return None
        rid = rid[: -len(suffix)]
    head, _, last = rid.rpartition("-")
    if last.startswith("b") and last[1:].replace(".", "").isdigit():
        return head, last[1:]
    return rid, ""


def pair_key(rec: RequestRecord) -> str | None:
    """`{stream}-{index}-{turn}` from the record's id (`{stream}-{index}-b{path}-{turn}` for a step of an agent's
    sub-agent), None when the id is not of the request-stream form."""
    split = split_id(rec)
    if split is None:
        return None
    rid, branch = split
    parts = rid.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return f"{parts[1]}-{parts[2]}" + (f"-b{branch}" if branch else "") + f"-{rec.turn}"


def _us(seconds: float | None) -> int:
    return NO_VALUE if seconds is None else max(int(seconds * 1e6 + 0.5), 0)


# Where `fates.latencies` has each of `PAIR_METRICS`.
_AT = tuple(RECORDED_METRICS.index(m) for m in PAIR_METRICS)


def _row(plan: LatencyPlan, values: tuple[float | None, ...]) -> list[int]:
    """The record's values in `PAIR_METRICS` order, measured or censored as its fate's row says (`fates.latencies`
    of it)."""
    censored = plan.censored
    return [CENSORED if m in censored else _us(values[i]) for m, i in zip(PAIR_METRICS, _AT, strict=True)]


class PairSamples(RowSample):
    """Variant -> kept keys and, per metric of `PAIR_METRICS`, their values; mergeable (`to_wire` / `merge_wire`, or
    `merge`)."""

    __slots__ = ()

    def __init__(self, cap: int = PAIR_CAP) -> None:
        super().__init__(cap, len(PAIR_METRICS))

    def add(
        self,
        rec: RequestRecord,
        row: FateRow | None = None,
        lat: tuple[LatencyPlan, tuple[float | None, ...]] | None = None,
    ) -> None:
        """A record, its values as its fate's row says (measure/fates.py; `row` and `lat`, its `fates.latencies`:
        when the caller has them already)."""
        row = row or FATES[fate_of(rec)]
        if not row.pairs:
            return
        key = pair_key(rec)
        if key is None:
            return
        h = pair_hash(key)
        rows = self.admit(rec.variant, h)
        if rows is None:
            return
        rows.keys.append(h)
        for col, v in zip(rows.columns, _row(*(lat or latencies(rec, row))), strict=True):
            col.append(v)

    def samples(self, variant: str) -> tuple[array[int], dict[str, array[int]]]:
        """The variant's kept keys and, per metric, its values (µs; `NO_VALUE`: none; `CENSORED`: failed), row for
        row."""
        rows = self.variants.get(variant) or Rows(len(PAIR_METRICS))
        return rows.keys, dict(zip(PAIR_METRICS, rows.columns, strict=True))
