"""A scenario's `traffic.dataset` read for replay: the file read and filtered once per process, and the checks that
need its rows (enough rows to sample, an output length for every row).

Run by the preflight step before any load (loadgen/preflight.py, which turns the problems into the field's issues)
and by the sampler, which gets the same rows from the cache.
"""

from __future__ import annotations

from pathlib import Path

from loadgen.config.errors import ConfigError, SubpathIssues
from loadgen.config.traffic import DatasetReplay
from loadgen.traffic.dataset_selection import LengthFilter, load_dataset
from loadgen.traffic.datasets import Dataset

__all__ = ["replay_rows"]

_CACHE: dict[tuple[str, int | None, int | None, int | None], Dataset] = {}


def replay_rows(replay: DatasetReplay) -> Dataset:
    """The usable rows that pass the filters, in file order. Raises ``SubpathIssues`` whose paths are relative to
    ``traffic.dataset`` (``path`` for the file's own problems, with its line; ``sample``; ``default_output_tokens``)."""
    filters = LengthFilter(
        min_prompt_tokens=replay.min_prompt_tokens,
        max_prompt_tokens=replay.max_prompt_tokens,
        max_output_tokens=replay.max_output_tokens,
    )
    # Relative paths resolve against the working directory, so the key is the absolute path.
    key = (
        str(Path(replay.path).absolute()),
        replay.min_prompt_tokens,
        replay.max_prompt_tokens,
        replay.max_output_tokens,
    )
    dataset = _CACHE.get(key)
    if dataset is None:
        try:
            dataset = _CACHE[key] = load_dataset(replay.path, filters)
        except ConfigError as exc:
            raise SubpathIssues([(("path",), "; ".join(issue.render(exc.source) for issue in exc.issues))]) from None
    issues: list[tuple[tuple[str | int, ...], str]] = []
    if replay.sample is not None and not replay.replace and replay.sample > len(dataset.records):
        issues.append(
            (
                ("sample",),
                f"cannot sample {replay.sample} rows without replacement: {len(dataset.records)} usable row(s) "
                "after the filters (sample fewer, or set replace: true)",
            )
        )
    if replay.default_output_tokens is None:
        bare = next((r for r in dataset.records if r.output_tokens is None), None)
        if bare is not None:
            issues.append(
                (
                    ("default_output_tokens",),
                    f"{replay.path}:{bare.line} gives no output_tokens (nor a reply to measure): set "
                    "default_output_tokens, the max_tokens of such rows",
                )
            )
    if issues:
        raise SubpathIssues(issues)
    return dataset
