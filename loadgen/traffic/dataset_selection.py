"""Which rows of a dataset are replayed: bounds on their length (`LengthFilter`, `filter_dataset`) and a sample
seeded by the scenario's seed alone (`sample_dataset`), so every worker and every run replays the same rows in the
same order; `load_dataset` reads (traffic/datasets.py), filters and samples in one call.

A filter or a sample that leaves no row is a `ConfigError` (exit 2) naming the file and why each row went.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from loadgen.traffic.datasets import Dataset, DatasetRecord, count_summary, dataset_error, read_dataset

__all__ = ["LengthFilter", "filter_dataset", "load_dataset", "sample_dataset"]


@dataclass(frozen=True, slots=True)
class LengthFilter:
    """Bounds on a row's length (inclusive; None = no bound). Prompt lengths count everything sent, in characters
    or in words (the approximate token count); a row that gives no output length passes ``max_output_tokens``."""

    min_prompt_chars: int | None = None
    max_prompt_chars: int | None = None
    min_prompt_tokens: int | None = None
    max_prompt_tokens: int | None = None
    max_output_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("min_prompt_chars", "max_prompt_chars", "min_prompt_tokens", "max_prompt_tokens"):
            _check_bound(name, getattr(self, name), 0)
        _check_bound("max_output_tokens", self.max_output_tokens, 1)
        for unit in ("chars", "tokens"):
            low, high = getattr(self, f"min_prompt_{unit}"), getattr(self, f"max_prompt_{unit}")
            if low is not None and high is not None and low > high:
                raise ValueError(f"min_prompt_{unit} ({low}) is above max_prompt_{unit} ({high}): no row could pass")

    def rejects(self, record: DatasetRecord) -> str | None:
        """Why ``record`` is filtered out, or None if it passes."""
        for unit, length in (("chars", record.prompt_chars), ("tokens", record.prompt_words)):
            low, high = getattr(self, f"min_prompt_{unit}"), getattr(self, f"max_prompt_{unit}")
            if low is not None and length < low:
                return f"prompt under min_prompt_{unit}={low}"
            if high is not None and length > high:
                return f"prompt over max_prompt_{unit}={high}"
        out = record.output_tokens
        if self.max_output_tokens is not None and out is not None and out > self.max_output_tokens:
            return f"output over max_output_tokens={self.max_output_tokens}"
        return None


def _check_bound(name: str, value: object, least: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} must be a whole number >= {least} (or unset), got {value!r}")


def filter_dataset(dataset: Dataset, filters: LengthFilter) -> Dataset:
    """The rows of ``dataset`` that pass ``filters``; the others are counted in ``skipped`` by reason."""
    kept: list[DatasetRecord] = []
    dropped: Counter[str] = Counter(dict(dataset.skipped))
    reasons: Counter[str] = Counter()
    for record in dataset.records:
        reason = filters.rejects(record)
        if reason is None:
            kept.append(record)
        else:
            reasons[reason] += 1
    if not kept:
        raise dataset_error(
            dataset.source,
            f"no rows left after the length filters: all {len(dataset.records)} usable rows filtered out "
            f"({count_summary(reasons)})",
        )
    dropped.update(reasons)
    return Dataset(dataset.source, tuple(kept), dataset.rows, tuple(sorted(dropped.items())))


def sample_dataset(dataset: Dataset, n: int, seed: int, *, replace: bool = False) -> Dataset:
    """``n`` rows drawn with a generator seeded from ``seed`` alone: the same rows, in the same order, on every
    worker and run. Without replacement ``n`` may not exceed the rows left."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"the sample size must be a whole number >= 1, got {n!r}")
    records = dataset.records
    if not replace and n > len(records):
        raise dataset_error(
            dataset.source,
            f"cannot sample {n} rows without replacement: only {len(records)} usable row(s) "
            "(sample fewer, or with replacement)",
        )
    # A string seed is hashed with SHA-512 by random.Random: stable across processes, unlike hash().
    rng = random.Random(f"loadgen.datasets\x1f{seed}")
    picked = rng.choices(records, k=n) if replace else rng.sample(records, n)
    return Dataset(dataset.source, tuple(picked), dataset.rows, dataset.skipped)


def load_dataset(
    path: str | Path,
    filters: LengthFilter | None = None,
    n: int | None = None,
    seed: int = 0,
    *,
    replace: bool = False,
) -> Dataset:
    """Read, filter and sample in one call (``n=None``: every row that passes, in file order)."""
    dataset = read_dataset(path)
    if filters is not None:
        dataset = filter_dataset(dataset, filters)
    return dataset if n is None else sample_dataset(dataset, n, seed, replace=replace)
