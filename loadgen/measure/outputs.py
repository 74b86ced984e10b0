"""Reply texts keyed by the request's identity, for comparing each variant's output with the baseline's
(report/quality.py).

Kept only when the scenario asks for quality (`quality:`): then a request keeps its reply's text when this sample
would keep it (`wants`, asked before the request is sent: the others keep the C read path) or when it carries a
reference answer; the recorder, off the hot path, hands it here, and this keeps a bounded, seeded sample of it. The
same keys as the paired latencies (measure/pairs.py), `{stream}-{index}-{turn}`: the same prompt in every variant;
the same rule (measure/hash_sample.py), at most `cap` texts per variant: the variants keep the same requests (pairs
survive) whatever the order the workers' reports merge in; a worker ships only the texts above its level, then
forgets them.

A request whose dataset row carries a reference answer (`expected`; traffic/references.py) is judged here too,
every one of them (not only the sampled): `judged[(variant, mix)]` counts [judged, right].

Bounds: at most `OUTPUT_CAP` texts per variant, each cut at `MAX_CHARS` characters (at most ~1 MB of text per variant
on the master). Only successful requests of the measured window: a failed or cut reply has no whole output to compare.
"""

from __future__ import annotations

from typing import Any

from loadgen.measure.hash_sample import BITS, HashSample, key_hash
from loadgen.measure.pairs import pair_key
from loadgen.measure.records import RequestRecord

__all__ = ["MAX_CHARS", "OUTPUT_CAP", "OutputSamples"]

OUTPUT_CAP = 500
# ~500 tokens of English: past the first k tokens that agreement compares, enough for the edit similarity of typical
# benchmark replies; a longer reply is compared on its first MAX_CHARS characters (the report says so).
MAX_CHARS = 2048


class OutputSamples(HashSample):
    """Variant -> {key hash: (mix, text)}; mergeable (`to_wire` / `merge_wire`). `wants(h)`: whether a reply whose
    key hashes to `h` would be kept now (the stream then keeps its text)."""

    __slots__ = ("texts", "judged")

    def __init__(self, cap: int = OUTPUT_CAP) -> None:
        super().__init__(cap)
        self.texts: dict[str, dict[int, tuple[str, str]]] = {}
        self.judged: dict[tuple[str, str], list[int]] = {}

    def add(self, rec: RequestRecord) -> None:
        if rec.error is not None or rec.warmup or rec.cut_by_stop or rec.chunk_text_ends is None:
            return
        if rec.reference is not None:
            counts = self.judged.setdefault((rec.variant, rec.mix), [0, 0])
            counts[0] += 1
            counts[1] += rec.reference.judge(rec.output_text)
        key = pair_key(rec)
        if key is None:
            return
        h = key_hash(key)
        if self._admit(rec.variant, h):
            self._texts(rec.variant)[h] = (rec.mix, rec.output_text[:MAX_CHARS])

    def _texts(self, variant: str) -> dict[int, tuple[str, str]]:
        col = self.texts.get(variant)
        if col is None:
            col = self.texts[variant] = {}
        return col

    def _keep_from(self, level: int) -> None:
        top = 1 << (BITS - level)
        for v, col in self.texts.items():
            self.texts[v] = {h: t for h, t in col.items() if h < top}

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
        self._rise_to(int(wire.get("level", 0)))
        for variant, rows in wire.get("texts", ()):
            keys = [int(h) for h, _, _ in rows]
            kept = self._admit_wire(variant, keys)
            for i in range(len(rows)) if kept is None else kept:
                _, mix, text = rows[i]
                self._texts(variant)[keys[i]] = (str(mix), str(text))
        self._settle()
        for variant, mix, n, right in wire.get("judged", ()):
            counts = self.judged.setdefault((str(variant), str(mix)), [0, 0])
            counts[0] += int(n)
            counts[1] += int(right)

    def merge(self, other: OutputSamples) -> None:
        self.merge_wire(other.to_wire())

    def of(self, variant: str) -> dict[int, tuple[str, str]]:
        """The variant's kept texts: key hash -> (mix, text)."""
        return self.texts.get(variant, {})
