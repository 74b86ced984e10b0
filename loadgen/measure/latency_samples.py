"""A bounded, seeded sample of requests per variant, for the latency fit (report/latency_fit.py): why TTFT and E2E
are what they are needs per-request (prompt tokens, TTFT, output tokens, E2E), which the histograms do not keep.

Bounded like the paired samples (measure/pairs.py) by hash sampling: a request id's 63-bit hash `h` survives at
level L when `h < 2**(63 - L)`; the level is the lowest at which no variant keeps more than `cap` rows and only ever
rises, so the kept set is the same whatever the order workers' deltas merge in, and each kept row stands for
`2**level` requests (the in-flight estimate of the fit scales by it). A worker keeps a level of its own and ships
only the rows above it.

Beside the rows, exact counts (not sampled) per variant of how many tokens each chunk after a request's first
carried (`chunk_sizes`): with speculative decoding a step emits 1 + the accepted drafts in one chunk, so their
distribution is the client's view of the acceptance (report/speculative.py).

Rows are requests of the measured window (no warm-up, no cut by the stop). A failed one is kept too (flag `ok` 0):
it held a slot while it ran, so it counts in the in-flight estimate, but it is no sample of the fit. Values are
integers: tokens, microseconds, and the wall clock in milliseconds (send and completion: the workers of a
Kubernetes run are on several hosts, whose monotonic clocks differ, their wall clocks agree to NTP's milliseconds).
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import Any

from loadgen.measure.pairs import pair_hash
from loadgen.measure.records import RequestRecord, TokenSource
from loadgen.measure.wall_clock import WALL_CLOCK

__all__ = ["FIELDS", "LATENCY_SAMPLE_CAP", "NONE", "LatencySamples"]

# Rows kept per variant at most: a slope's interval narrows as 1/sqrt(n), and at 2,000 requests the fit's 200
# bootstrap resamples take ~50 ms per variant; 2,000 rows of 10 integers are 160 KB per variant on the master.
LATENCY_SAMPLE_CAP = 2_000
_BITS = 63
NONE = -1  # no such value (no usage from the server, no first token)
# ok; prompt tokens (usage, else the target when `prompt_from_usage` is 0); cached prompt tokens (NONE: not
# reported); tokens after the first chunk (the TPOT denominator); TTFT, first-to-last-chunk span and E2E in µs;
# send and completion on the wall clock in ms.
FIELDS: tuple[str, ...] = (
    "ok",
    "prompt_tokens",
    "prompt_from_usage",
    "cached_tokens",
    "decode_tokens",
    "ttft_us",
    "span_us",
    "e2e_us",
    "sent_ms",
    "done_ms",
)


def _us(seconds: float | None) -> int:
    return NONE if seconds is None else max(int(seconds * 1e6 + 0.5), 0)


def _decode_tokens(rec: RequestRecord) -> int:
    """The tokens that arrived after the first chunk: TPOT's denominator, as `RequestRecord.tpot` counts it."""
    if len(rec.chunk_times) < 2:
        return 0
    if rec.token_source in (TokenSource.SERVER, TokenSource.TOKENIZER):
        return max(rec.tokens_received - rec.chunk_tokens[0], 0)
    n = rec.output_token_count - rec.chunk_tokens[0]
    if rec.token_source == TokenSource.ONE_PER_CHUNK and rec.output_count_beyond_chunks == 1:
        n -= 1  # the end-of-sequence token that came with no chunk (records.py)
    return max(n, 0)


def row_of(rec: RequestRecord, wall_done: float) -> list[int]:
    """The record's values in `FIELDS` order; `wall_done`: its completion on the wall clock (s)."""
    done = rec.done if rec.done is not None else rec.sent
    sent_wall = wall_done - (done - rec.sent)
    first, last = (rec.chunk_times[0], rec.chunk_times[-1]) if rec.chunk_times else (None, None)
    usage = rec.prompt_tokens is not None
    return [
        int(rec.error is None),
        rec.prompt_tokens if rec.prompt_tokens is not None else rec.prompt_tokens_target,
        int(usage),
        NONE if rec.cached_prompt_tokens is None else rec.cached_prompt_tokens,
        _decode_tokens(rec),
        _us(rec.ttft),
        NONE if first is None or last is None else _us(last - first),
        _us(rec.e2e) if rec.error is None else NONE,
        int(sent_wall * 1000 + 0.5),
        int(wall_done * 1000 + 0.5),
    ]


class _Rows:
    __slots__ = ("keys", "values", "seen")

    def __init__(self) -> None:
        self.keys = array("q")
        self.values = array("q")  # row-major, len(FIELDS) per key
        # Keys added since the run began, by the highest level each survives at (as pairs.py counts them).
        self.seen = [0] * (_BITS + 1)

    def kept_at(self, level: int) -> int:
        return sum(self.seen[level:])

    def keep_from(self, level: int) -> None:
        top = 1 << (_BITS - level)
        w = len(FIELDS)
        rows = [i for i, h in enumerate(self.keys) if h < top]
        if len(rows) == len(self.keys):
            return
        self.values = array("q", (v for i in rows for v in self.values[i * w : (i + 1) * w]))
        self.keys = array("q", (self.keys[i] for i in rows))


class LatencySamples:
    """Variant -> sampled rows; mergeable (`to_wire` / `merge_wire`, or `merge`)."""

    __slots__ = ("level", "cap", "variants", "chunk_sizes")

    def __init__(self, cap: int = LATENCY_SAMPLE_CAP) -> None:
        self.level = 0
        self.cap = cap
        self.variants: dict[str, _Rows] = {}
        self.chunk_sizes: dict[str, Counter[int]] = {}

    def _rows(self, variant: str) -> _Rows:
        r = self.variants.get(variant)
        if r is None:
            r = self.variants[variant] = _Rows()
        return r

    def add(self, rec: RequestRecord, wall_now: float) -> None:
        """`wall_now` (the aggregate's wall time of the record) does not place it: a worker records at idle
        priority, a while after the completion, and a rebuild from raw rows passes monotonic seconds. The record's
        own monotonic `done` does, moved onto the wall clock by this host's offset between the two clocks: exact on
        the host that ran it, the same shift for every row of a shard read elsewhere (its requests still line up
        with each other)."""
        del wall_now
        if rec.warmup or rec.cut_by_stop:
            return
        if len(rec.chunk_tokens) > 1:
            sizes = self.chunk_sizes.get(rec.variant)
            if sizes is None:
                sizes = self.chunk_sizes[rec.variant] = Counter()
            sizes.update(rec.chunk_tokens[1:])
        wall_done = (rec.done if rec.done is not None else rec.sent) + WALL_CLOCK.offset()
        h = pair_hash(f"{rec.variant}\0{rec.request_id}")
        if _BITS - h.bit_length() < self.level:
            return
        rows = self._rows(rec.variant)
        rows.keys.append(h)
        rows.values.extend(row_of(rec, wall_done))
        rows.seen[_BITS - h.bit_length()] += 1
        if rows.kept_at(self.level) > self.cap:
            self._settle()

    def _settle(self) -> None:
        level = self.level
        while level < _BITS and any(r.kept_at(level) > self.cap for r in self.variants.values()):
            level += 1
        if level != self.level:
            self.level = level
            for r in self.variants.values():
                r.keep_from(level)

    def is_empty(self) -> bool:
        return not any(r.keys for r in self.variants.values()) and not any(self.chunk_sizes.values())

    def to_wire(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "rows": [[v, r.keys.tolist(), r.values.tolist()] for v, r in self.variants.items() if r.keys],
            "chunk_sizes": [[v, sorted(c.items())] for v, c in self.chunk_sizes.items() if c],
        }

    def clear_rows(self) -> None:
        """A worker after shipping a delta: the rows go, the level and the counts of keys seen stay."""
        for r in self.variants.values():
            r.keys, r.values = array("q"), array("q")
        self.chunk_sizes = {}

    def merge_wire(self, wire: dict[str, Any]) -> None:
        level = int(wire.get("level", 0))
        if level > self.level:
            self.level = level
            for r in self.variants.values():
                r.keep_from(level)
        top = 1 << (_BITS - self.level)
        w = len(FIELDS)
        for variant, pairs in wire.get("chunk_sizes", ()):
            self.chunk_sizes.setdefault(variant, Counter()).update({int(k): int(c) for k, c in pairs})
        for variant, keys, values in wire.get("rows", ()):
            rows = self._rows(variant)
            seen = rows.seen
            for h in keys:
                seen[_BITS - h.bit_length()] += 1
            if keys and max(keys) < top:  # every row kept (the usual case): added whole, not row by row
                rows.keys.extend(keys)
                rows.values.extend(values[: len(keys) * w])
                continue
            for i, h in enumerate(keys):
                if h < top:
                    rows.keys.append(h)
                    rows.values.extend(values[i * w : (i + 1) * w])
        self._settle()

    def merge(self, other: LatencySamples) -> None:
        self.merge_wire(other.to_wire())

    def table(self, variant: str) -> dict[str, list[int]]:
        """The variant's kept rows column by column (`FIELDS`)."""
        r = self.variants.get(variant) or _Rows()
        w = len(FIELDS)
        return {name: r.values[j::w].tolist() for j, name in enumerate(FIELDS)}

    @property
    def weight(self) -> int:
        """How many requests each kept row stands for."""
        return 1 << self.level
