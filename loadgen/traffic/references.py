"""A dataset row's reference answer (`expected`, judged by `match`), for accuracy per variant under load.

A row of a replayed dataset (`traffic.dataset`) may carry `expected` (a string) and `match`, how a reply is judged
against it (default `exact`):

- `exact`: the reply is the expected text, both with their whitespace collapsed and case folded;
- `contains`: the reply holds the expected text (whitespace collapsed, case folded);
- `regex`: the expected text is a regular expression (Python's `re`) found somewhere in the reply (`(?i)` for case);
- `choice`: the expected text is one label of A to J (`B`); the reply chose the first of those letters standing alone
  in it ("B", "(B)", "B.", "The answer is B"), a word's letters never counting, nor "A" and "I" followed by a
  lowercase word (the article and the pronoun: "I think B" chose B).

Judged where the reply's text is kept (`quality:`; measure/outputs.py), on successful requests only: a failed request
gave no answer, and is in the variant's error rate already.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MATCHES", "Reference", "reference_of"]

MATCHES = ("exact", "contains", "regex", "choice")
_CHOICE = re.compile(r"(?<![A-Za-z0-9])([A-J])(?![A-Za-z0-9])")
_WORD_AFTER = re.compile(r"\s+[a-z]")


def _norm(text: str) -> str:
    return " ".join(text.split()).casefold()


@dataclass(frozen=True, slots=True)
class Reference:
    expected: str
    match: str = "exact"
    pattern: re.Pattern[str] | None = field(default=None, compare=False)

    def judge(self, reply: str) -> bool:
        """Whether `reply` is right."""
        if self.match == "exact":
            return _norm(reply) == _norm(self.expected)
        if self.match == "contains":
            return _norm(self.expected) in _norm(reply)
        if self.match == "regex":
            assert self.pattern is not None
            return self.pattern.search(reply) is not None
        return _chosen(reply) == self.expected.strip().upper()


def _chosen(reply: str) -> str | None:
    for m in _CHOICE.finditer(reply):
        if m.group(1) in "AI" and _WORD_AFTER.match(reply, m.end()):
            continue  # "A good answer", "I think": an article or a pronoun, not a choice
        return m.group(1)
    return None


def reference_of(row: dict[str, Any]) -> Reference | None:
    """The row's reference, None when it has no `expected`. Raises ValueError(field, message) for a bad one."""
    expected, match = row.get("expected"), row.get("match")
    if expected is None:
        if match is not None:
            raise ValueError("match", "given without 'expected' (the reference answer it judges replies against)")
        return None
    if not isinstance(expected, str) or not expected.strip():
        raise ValueError("expected", f"expected a non-empty string, got {expected!r}"[:200])
    match = "exact" if match is None else match
    if match not in MATCHES:
        raise ValueError("match", f"expected one of {', '.join(MATCHES)}, got {match!r}"[:200])
    if match == "regex":
        try:
            return Reference(expected, match, re.compile(expected))
        except re.error as e:
            raise ValueError("expected", f"not a regular expression: {e}") from None
    if match == "choice" and not _CHOICE.fullmatch(expected.strip().upper()):
        raise ValueError("expected", f"a choice is one label of A to J, got {expected!r}"[:200])
    return Reference(expected, match)
