"""Prompt text that looks like source code, for mixes with ``text: code`` (the built-in ``code`` mix).

The sampler cuts prompts as windows of a fixed count of *units* from one seeded block, and its length rule needs
every unit to be exactly one token wherever a window starts or ends (see traffic/sampler.py). Code text keeps that
rule with two kinds of unit:

- a *piece* with its leading space (`` def``, `` self``, `` (``, `` +=``, `` 0``): an identifier, keyword,
  operator or digit. Byte-level BPE pre-tokenizers (GPT-2's, SmolLM2's, Llama 3's) split before every space, so
  `` x`` is its own pre-token, one token when the vocabulary has it;
- a *line break* with the next line's indentation but one space (``"\\n" + " " * (4 * level - 1)``): the
  pre-tokenizer's "whitespace not followed by a non-space" rule makes it one pre-token, leaving the last space to
  the piece that follows. A break is always followed by a piece (never ends a window: a window that would end on
  one ends on a piece instead), so the indentation comes out as real 4-space levels.

Lines come from statement templates (``def $n ( $n , $n ) :``, ``for $n in $n :``, ``return $n``) with
identifier slots; a line ending in ``:`` opens a deeper level, ``return`` / ``raise`` / ``break`` close one.
Every line is at least one level deep (the body of a class or function), so no piece is ever needed without its
space. Spaces around every operator and bracket are the price of exact lengths: ``open(path)`` would be pre-tokens
whose merging differs between tokenizers.

Without a tokenizer the units are taken as one token each, as the prose words are (approximate). With one, the
vocabulary is checked once per sampler: pieces and breaks that are not one token are dropped (and templates that
need a dropped piece), then the rule is checked on a long text; a tokenizer that fails it, or leaves too few
pieces, gets ``None`` and the mix falls back to prose words.
"""

from __future__ import annotations

import random
from itertools import accumulate
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from loadgen.traffic.tokenizer import PromptTokenizer

__all__ = ["CodeBlock", "code_block", "count_units"]

# Slots: $n an identifier, $c a class name, $e an exception, $k a digit.
_TEMPLATES = (
    "def $n ( self , $n ) :",
    "def $n ( $n , $n = None ) :",
    "def $n ( self ) -> $c :",
    "class $c ( $c ) :",
    "if $n is None :",
    "if not $n :",
    "if $n > $k :",
    "elif $n == $n :",
    "else :",
    "for $n in $n :",
    "for $n in range ( $n ) :",
    "while $n < $n :",
    "with open ( $n ) as $n :",
    "try :",
    "except $e as $n :",
    "$n = $n ( $n )",
    "$n = $n . $n ( $n , $n )",
    "$n = [ $n for $n in $n ]",
    "$n = $n [ $k ]",
    "$n += $k",
    "$n = $n + $n * $k",
    "$n = len ( $n ) - $k",
    "$n = { }",
    "$n . append ( $n )",
    "self . $n = $n",
    "return $n",
    "return $n ( $n )",
    "return None",
    "raise $e ( $n )",
    "yield $n",
    "print ( $n , $n )",
    "assert $n is not None",
    "import $n",
    "from $n import $n",
    "pass",
    "break",
    "continue",
)
_NAMES = [
    "data",
    "path",
    "size",
    "count",
    "name",
    "value",
    "key",
    "item",
    "items",
    "result",
    "config",
    "node",
    "index",
    "buf",
    "text",
    "line",
    "lines",
    "args",
    "kwargs",
    "user",
    "request",
    "response",
    "error",
    "parser",
    "token",
    "tokens",
    "model",
    "batch",
    "cache",
    "queue",
    "state",
    "start",
    "end",
    "offset",
    "length",
    "total",
    "limit",
    "timeout",
    "client",
    "server",
    "file",
    "stream",
    "chunk",
    "row",
    "rows",
    "table",
    "field",
    "fields",
    "record",
    "records",
    "event",
    "handler",
    "callback",
    "options",
    "params",
    "output",
    "source",
    "target",
    "prefix",
    "suffix",
    "width",
    "height",
    "score",
    "x",
    "y",
    "i",
    "j",
    "n",
    "k",
    "os",
    "sys",
    "json",
    "re",
    "time",
]
_CLASSES = [
    "Config",
    "Parser",
    "Client",
    "Cache",
    "Node",
    "Buffer",
    "Request",
    "Response",
    "Model",
    "Table",
    "Event",
    "Handler",
]
_ERRORS = ["ValueError", "KeyError", "TypeError", "OSError", "RuntimeError"]
_DIGITS = tuple("0123456789")
_CLOSERS = ("return", "raise", "break", "continue", "pass")
_MAX_LEVEL = 4
# Fewer than these survive a tokenizer's check: its code would be too monotonous to pass for code; prose instead.
_MIN_NAMES, _MIN_TEMPLATES = 16, 12


class CodeBlock:
    """A seeded block of code units, endlessly repeated; ``window(first, n)`` is ``n`` units from unit ``first``."""

    __slots__ = ("text", "starts", "breaks", "size", "last_piece")

    def __init__(self, units: list[str], breaks: list[bool], last_piece: str) -> None:
        # The block opens and closes on a piece, so a wrap never puts two breaks side by side.
        assert units and not breaks[0] and not breaks[-1]
        self.text = "".join(units)
        self.starts = [0, *accumulate(len(u) for u in units)]
        self.breaks = breaks
        self.size = len(units)
        self.last_piece = last_piece  # ends a window that would end on a break

    def window(self, first: int, n: int) -> str:
        """The text of units ``first`` (< size) .. ``first + n - 1``, each with its leading whitespace."""
        if n <= 0:
            return ""
        if self.breaks[(first + n - 1) % self.size]:
            return self._span(first, n - 1) + self.last_piece
        return self._span(first, n)

    def _span(self, first: int, n: int) -> str:
        text, starts = self.text, self.starts
        laps, end = divmod(first + n, self.size)
        if laps == 0:
            return text[starts[first] : starts[end]]
        return "".join([text[starts[first] :], *([text] * (laps - 1)), text[: starts[end]]])


def count_units(text: str) -> int:
    """The units in a window's text (pieces and line breaks): its length in tokens when they are one each."""
    return sum(len(line.split()) for line in text.split("\n")) + text.count("\n")


def _break(level: int) -> str:
    return "\n" + " " * (4 * level - 1)


class _Vocabulary:
    __slots__ = ("templates", "slots", "levels")

    def __init__(self, templates: list[list[str]], slots: dict[str, tuple[str, ...]], levels: int) -> None:
        self.templates = templates
        self.slots = slots
        self.levels = levels  # deepest indentation level whose line break is usable (0: no line breaks)

    def units(self, rng: random.Random, n: int) -> tuple[list[str], list[bool]]:
        """``n`` units of code lines (more are drawn, then the block cut to a piece at both ends)."""
        units: list[str] = []
        breaks: list[bool] = []
        level = 1
        while len(units) < n + 16:
            fits = [t for t in self.templates if t[-1] != ":" or level < self.levels]
            template = rng.choice(fits)
            if units and self.levels:
                units.append(_break(level))
                breaks.append(True)
            for part in template:
                options = self.slots.get(part)
                units.append(" " + (rng.choice(options) if options else part))
                breaks.append(False)
            if template[-1] == ":":
                level += 1
            elif template[0] in _CLOSERS or rng.random() < 0.25:
                level = max(1, level - 1)
        del units[n:], breaks[n:]
        if breaks[-1]:
            units[-1], breaks[-1] = " pass", False
        return units, breaks


def _vocabulary(tokenizer: PromptTokenizer | None) -> _Vocabulary | None:
    slots = {"$n": tuple(_NAMES), "$c": tuple(_CLASSES), "$e": tuple(_ERRORS), "$k": _DIGITS}
    templates = [t.split() for t in _TEMPLATES]
    if tokenizer is None:
        return _Vocabulary(templates, slots, _MAX_LEVEL)

    def one(text: str) -> bool:
        return tokenizer.count(text) == 1

    slots = {k: tuple(p for p in v if one(" " + p)) for k, v in slots.items()}
    templates = [t for t in templates if all((p in slots and slots[p]) or (p not in slots and one(" " + p)) for p in t)]
    # A break counts as one token only before the space of the next piece, and after any piece.
    levels = 0
    for level in range(1, _MAX_LEVEL + 1):
        brk = _break(level)
        if not (one(brk) and tokenizer.count(f" x{brk} pass") == 3 and tokenizer.count(f" ){brk} pass") == 3):
            break
        levels = level
    if len(slots["$n"]) < _MIN_NAMES or len(templates) < _MIN_TEMPLATES or "pass" not in {t[0] for t in templates}:
        return None
    return _Vocabulary(templates, slots, levels)


def code_block(size: int, seed: int, tokenizer: PromptTokenizer | None = None) -> CodeBlock | None:
    """A block of ``size`` code units drawn with ``seed``; with ``tokenizer``, of units that are one token each
    there (checked on a long text), or None when that tokenizer cannot cut code to an exact length."""
    vocab = _vocabulary(tokenizer)
    if vocab is None:
        return None
    units, breaks = vocab.units(random.Random(seed), size)
    block = CodeBlock(units, breaks, " pass")
    if tokenizer is not None:
        # The rule the windows rely on, on two laps of the block behind a prose word (a prompt's tag), and on
        # windows from every line break (a window may open with one).
        word = tokenizer.one_token_words()[0]
        probe = word + block.window(size // 3, 2 * size)
        if tokenizer.count(probe) != 2 * size + 1:
            return None
        after_breaks = [block.window(i, 3) for i in range(size) if breaks[i]]
        if tokenizer.count(word + f" {word}".join(after_breaks)) != 4 * len(after_breaks):
            return None
    return block
