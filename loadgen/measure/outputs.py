"""Reply texts keyed by the request's identity, for comparing each variant's output with the baseline's
(report/quality.py).

Kept only when the scenario asks for quality (`quality:`): then a request keeps its reply's text when this sample
would keep it (`wants`, asked before the request is sent: the others keep the C read path) or when it carries a
reference answer; the recorder, off the hot path, hands it here, and this keeps a bounded, seeded sample of it. The
same keys and the same rule as the paired latencies (measure/pairs.py): a request's key `{stream}-{index}-{turn}` is
the same prompt in every variant, its 63-bit hash survives at level L when `h < 2**(63 - L)`, and the level is the
lowest at which no variant keeps more than `cap` texts. The rule depends on the key alone, so the variants keep the
same requests (pairs survive) whatever the order the workers' reports merge in; a worker keeps a level of its own
(never above the master's) and ships only the texts above it, then forgets them.

A request whose dataset row carries a reference answer (`expected`; traffic/references.py) is judged here too,
every one of them (not only the sampled): `judged[(variant, mix)]` counts [judged, right].

Bounds: at most `OUTPUT_CAP` texts per variant, each cut at `MAX_CHARS` characters (at most ~1 MB of text per variant
on the master). Only successful requests of the measured window: a failed or cut reply has no whole output to compare.
"""

from __future__ import annotations

from typing import Any

from loadgen.measure.pairs import pair_hash, pair_key
from loadgen.measure.records import RequestRecord

__all__ = ["MAX_CHARS", "OUTPUT_CAP", "OutputSamples"]

OUTPUT_CAP = 500
# ~500 tokens of English: past the first k tokens that agreement compares, enough for the edit similarity of typical
# benchmark replies; a longer reply is compared on its first MAX_CHARS characters (the report says so).
MAX_CHARS = 2048
_BITS = 63


def _zeros(h: int) -> int:
    return _BITS - h.bit_length()


class OutputSamples:
    """Variant -> {key hash: (mix, text)}; mergeable (`to_wire` / `merge_wire`)."""

    __slots__ = ("level", "cap", "texts", "seen", "judged")

    def __init__(self, cap: int = OUTPUT_CAP) -> None:
        self.level = 0
        self.cap = cap
        self.texts: dict[str, dict[int, tuple[str, str]]] = {}
        # Per variant: texts added since the run began, by the highest level each survives at (exact from the
        # current level up, as in pairs.py); on a worker this counts the texts shipped already too.
        self.seen: dict[str, list[int]] = {}
        self.judged: dict[tuple[str, str], list[int]] = {}

    def add(self, rec: RequestRecord) -> None:
        if rec.error is not None or rec.warmup or rec.cut_by_stop or rec.chunk_text_ends is None:
            return
        if rec.reference is not None:
            counts = self.judged.setdefault((rec.variant, rec.mix), [0, 0])
            counts[0] += 1
            counts[1] += rec.reference.judge(rec.output_text)
        key = pair_key(rec)
        if key is not None:
            self._put(rec.variant, pair_hash(key), rec.mix, rec.output_text[:MAX_CHARS])

    def _put(self, variant: str, h: int, mix: str, text: str) -> None:
        if _zeros(h) < self.level:
            return
        col = self.texts.get(variant)
        if col is None:
            col = self.texts[variant] = {}
            self.seen[variant] = [0] * (_BITS + 1)
        col[h] = (mix, text)
        seen = self.seen[variant]
        seen[_zeros(h)] += 1
        if sum(seen[self.level :]) > self.cap:
            self._settle()

    def _settle(self) -> None:
        level = self.level
        while level < _BITS and any(sum(s[level:]) > self.cap for s in self.seen.values()):
            level += 1
        self._raise(level)

    def _raise(self, level: int) -> None:
        if level <= self.level:
            return
        self.level = level
        top = 1 << (_BITS - level)
        for v, col in self.texts.items():
            self.texts[v] = {h: t for h, t in col.items() if h < top}

    def wants(self, h: int) -> bool:
        """Whether a reply whose key hashes to `h` would be kept now (the stream then keeps its text)."""
        return _zeros(h) >= self.level

    def is_empty(self) -> bool:
        return not any(self.texts.values()) and not self.judged

    def to_wire(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "texts": [[v, [[h, mix, text] for h, (mix, text) in col.items()]] for v, col in self.texts.items() if col],
            "judged": [[v, m, n, right] for (v, m), (n, right) in self.judged.items()],
        }

    def clear_rows(self) -> None:
        """A worker after shipping a delta: the texts go, the level and the counts stay."""
        for v in self.texts:
            self.texts[v] = {}
        self.judged = {}

    def merge_wire(self, wire: dict[str, Any]) -> None:
        self._raise(int(wire.get("level", 0)))
        for variant, rows in wire.get("texts", ()):
            for h, mix, text in rows:
                self._put(variant, int(h), str(mix), str(text))
        for variant, mix, n, right in wire.get("judged", ()):
            counts = self.judged.setdefault((str(variant), str(mix)), [0, 0])
            counts[0] += int(n)
            counts[1] += int(right)

    def merge(self, other: OutputSamples) -> None:
        self.merge_wire(other.to_wire())

    def of(self, variant: str) -> dict[int, tuple[str, str]]:
        """The variant's kept texts: key hash -> (mix, text)."""
        return self.texts.get(variant, {})
