"""A bounded, seeded sample of requests per variant, for the latency fit (report/latency_fit.py): why TTFT and E2E
are what they are needs per-request (prompt tokens, TTFT, output tokens, E2E), which the histograms do not keep.

Bounded like the paired samples by hash sampling (measure/hash_sample.py), keyed by variant and request id: at most
`cap` rows per variant, the same whatever the order workers' deltas merge in, each kept row standing for `2**level`
requests (`weight`: the in-flight estimate of the fit scales by it). A worker ships only the rows above its level.

Beside the rows, exact counts (not sampled) per variant of how many tokens each chunk after a request's first
carried (`chunk_sizes`): with speculative decoding a step emits 1 + the accepted drafts in one chunk, so their
distribution is the client's view of the acceptance (report/speculative.py).

Rows are requests of the measured window (no warm-up, no cut by the stop). A failed one is kept too (flag `ok` 0):
it held a slot while it ran, so it counts in the in-flight estimate, but it is no sample of the fit. Values are
integers: tokens, microseconds, and the wall clock in milliseconds (send and completion: the workers of a
Kubernetes run are on several hosts, whose monotonic clocks differ, their wall clocks agree to NTP's milliseconds).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from loadgen.measure.hash_sample import Rows, RowSample, key_hash
from loadgen.measure.records import RequestRecord, TokenSource
from loadgen.measure.wall_clock import WALL_CLOCK

__all__ = ["FIELDS", "LATENCY_SAMPLE_CAP", "NONE", "LatencySamples"]

# Rows kept per variant at most: a slope's interval narrows as 1/sqrt(n), and at 2,000 requests the fit's 200
# bootstrap resamples take ~50 ms per variant; 2,000 rows of 10 integers are 160 KB per variant on the master.
LATENCY_SAMPLE_CAP = 2_000
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


class LatencySamples(RowSample):
    """Variant -> sampled rows (`Rows` of one column, `len(FIELDS)` values per key); mergeable (`to_wire` /
    `merge_wire`, or `merge`)."""

    __slots__ = ("chunk_sizes",)

    def __init__(self, cap: int = LATENCY_SAMPLE_CAP) -> None:
        super().__init__(cap, 1, len(FIELDS))
        self.chunk_sizes: dict[str, Counter[int]] = {}

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
        h = key_hash(f"{rec.variant}\0{rec.request_id}")
        rows = self.admit(rec.variant, h)
        if rows is None:
            return
        wall_done = (rec.done if rec.done is not None else rec.sent) + WALL_CLOCK.offset()
        rows.keys.append(h)
        rows.columns[0].extend(row_of(rec, wall_done))

    def is_empty(self) -> bool:
        return self.rows_empty() and not any(self.chunk_sizes.values())

    def to_wire(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "rows": self.rows_wire(),
            "chunk_sizes": [[v, sorted(c.items())] for v, c in self.chunk_sizes.items() if c],
        }

    def clear_rows(self) -> None:
        """A worker after shipping a delta: the rows go, the level and the counts of keys seen stay."""
        super().clear_rows()
        self.chunk_sizes = {}

    def merge_wire(self, wire: dict[str, Any]) -> None:
        for variant, pairs in wire.get("chunk_sizes", ()):
            self.chunk_sizes.setdefault(variant, Counter()).update({int(k): int(c) for k, c in pairs})
        self.merge_rows_wire(int(wire.get("level", 0)), wire.get("rows", ()))

    def merge(self, other: LatencySamples) -> None:
        self.merge_wire(other.to_wire())

    def table(self, variant: str) -> dict[str, list[int]]:
        """The variant's kept rows column by column (`FIELDS`)."""
        values = (self.variants.get(variant) or Rows(1, len(FIELDS))).columns[0]
        w = len(FIELDS)
        return {name: values[j::w].tolist() for j, name in enumerate(FIELDS)}
