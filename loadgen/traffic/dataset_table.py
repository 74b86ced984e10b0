"""A replayed dataset (``traffic.dataset``) as the sampler's table: every usable row as ready-made request parts,
in a replay order seeded by the scenario's seed alone (traffic/sampler.py walks it), with its length class as the
request's bucket. Built once per sampler, when the run starts; nothing here runs per request.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from loadgen.traffic.datasets import Dataset
    from loadgen.traffic.references import Reference
    from loadgen.traffic.tokenizer import PromptTokenizer

__all__ = ["LENGTH_CLASSES", "DatasetTable", "length_class"]


# A dataset row's bucket: its length class, by prompt tokens (the chat mix's bucket bounds), else "xlong".
LENGTH_CLASSES: tuple[tuple[int, str], ...] = ((200, "short"), (1000, "medium"), (4000, "long"))


def _words(text: str) -> int:
    return len(text.split())


def length_class(prompt_tokens: int) -> str:
    """The bucket a dataset row of ``prompt_tokens`` falls in."""
    for bound, name in LENGTH_CLASSES:
        if prompt_tokens <= bound:
            return name
    return "xlong"


class DatasetTable:
    """A dataset's rows as ready-made request parts, in their replay order (seeded by the scenario's seed)."""

    __slots__ = ("name", "rows", "overhead")

    def __init__(
        self,
        name: str,
        dataset: Dataset,
        seed: int,
        default_output_tokens: int | None,
        sample: int | None = None,
        replace: bool = False,
        tokenizer: PromptTokenizer | None = None,
    ) -> None:
        from loadgen.traffic.dataset_selection import sample_dataset

        self.name = name
        self.overhead: int | None = None
        n = len(dataset.records) if sample is None else sample
        ordered = sample_dataset(dataset, n, seed, replace=replace).records
        count: Callable[[str], int] = tokenizer.count if tokenizer is not None else _words
        rows: list[tuple[str, str, str, tuple[dict[str, str], ...] | None, int, int, Reference | None]] = []
        for record in ordered:
            out = record.output_tokens if record.output_tokens is not None else default_output_tokens
            if out is None:
                raise ValueError(f"{dataset.source}:{record.line}: no output_tokens and no default_output_tokens")
            if record.messages is None:
                system, prompt, messages = "", record.prompt or "", None
            else:
                texts = [m.content for m in record.messages]
                system = texts[0] if record.messages[0].role == "system" and len(texts) > 1 else ""
                prompt = "\n".join(texts[1:] if system else texts)
                messages = tuple({"role": m.role, "content": m.content} for m in record.messages)
            tokens = sum(count(text) for text in record.texts())
            rows.append((length_class(tokens), system, prompt, messages, tokens, out, record.reference))
        self.rows = rows
