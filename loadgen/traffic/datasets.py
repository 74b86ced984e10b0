"""Replay of a user's dataset: read and check it, before any load is sent (which of its rows are replayed: length
filters and a seeded sample, traffic/dataset_selection.py).

Two shapes of row, in a JSON list (a ``.json`` file whose first character is ``[``) or one row per line (JSONL):

- ShareGPT: ``{"conversations": [{"from": "human" | "gpt" | "system", "value": str}, ...]}`` (other keys, such as
  ``id``, are ignored; ``user``, ``assistant`` and the exports' ``chatgpt`` / ``bing`` / ``bard`` are accepted too).
  As vLLM's ShareGPT benchmark does, a row is replayed as its first exchange: the turns up to the first reply that
  follows a human turn are the messages sent, and the reply's length in words is the output length to ask for
  (``output_tokens_estimated``), unless the row gives ``output_tokens``. A conversation without a human turn
  (the dumps hold empty ones) is skipped and counted, not an error.
- Simple: ``{"prompt": str}`` or ``{"messages": [{"role": "system" | "user" | "assistant", "content": str}]}``,
  either with an optional ``output_tokens`` (a whole number >= 1).

Keys a row does not use are ignored as metadata, unless one looks like a misspelt known field (``output_token``):
that is an error, since ignoring it would silently drop the user's setting.

Every malformed row is a ``ConfigError`` (exit 2) whose issues name the file, the line (JSONL: the row's line; a
JSON list: the line where the row starts, and its index in the path), the field and what was expected, e.g.
``data.jsonl:17: messages[2].role: expected one of system, user, assistant, got 'bot'``. Lengths are approximate:
characters, and words as a stand-in for tokens (chat-template overhead not included).

Pure: the standard library, orjson and ``loadgen.config.errors``.
"""

from __future__ import annotations

import difflib
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson

from loadgen.config.errors import ConfigError, ConfigIssue, describe_value
from loadgen.traffic.references import Reference, reference_of

__all__ = [
    "ROLES",
    "Dataset",
    "DatasetRecord",
    "Message",
    "approximate_tokens",
    "count_summary",
    "dataset_error",
    "read_dataset",
]

ROLES: tuple[str, ...] = ("system", "user", "assistant")
_SHAREGPT_ROLES = MappingProxyType(
    {
        "human": "user",
        "user": "user",
        "gpt": "assistant",
        "assistant": "assistant",
        "chatgpt": "assistant",
        "bing": "assistant",
        "bard": "assistant",
        "system": "system",
    }
)
_SIMPLE_FIELDS = ("prompt", "messages", "output_tokens", "expected", "match")
_MESSAGE_FIELDS = ("role", "content")
_TURN_FIELDS = ("from", "value")
# Past this many malformed rows the rest are counted, not listed: the first few are enough to fix a generator.
_MAX_ISSUES = 20
_JSON_SPACE = re.compile(r"[ \t\n\r]*")
_NO_HUMAN_TURN = "conversation without a human turn"


@dataclass(frozen=True, slots=True)
class Message:
    role: str  # one of ROLES
    content: str


@dataclass(frozen=True, slots=True)
class DatasetRecord:
    """One usable row: either ``prompt`` or ``messages`` is set. ``line`` is where the row starts in the file
    (1-based), ``row`` its position among the file's rows (0-based)."""

    line: int
    row: int
    prompt: str | None
    messages: tuple[Message, ...] | None
    output_tokens: int | None  # None: the row does not say; let the mix or the server decide
    output_tokens_estimated: bool = False  # True: words of a ShareGPT reply, not a count the row gave
    reference: Reference | None = None  # `expected` / `match`: the answer a reply is judged against (quality:)

    def texts(self) -> tuple[str, ...]:
        if self.prompt is not None:
            return (self.prompt,)
        return tuple(m.content for m in self.messages or ())

    @property
    def prompt_chars(self) -> int:
        return sum(len(text) for text in self.texts())

    @property
    def prompt_words(self) -> int:
        """Words in everything sent: the approximate prompt length in tokens."""
        return approximate_tokens(self.texts())


@dataclass(frozen=True, slots=True)
class Dataset:
    """The usable rows of ``source`` (in file order until sampled), how many rows it had, and the rows left out
    with the reason for each kind: ``(reason, count)`` pairs."""

    source: str
    records: tuple[DatasetRecord, ...]
    rows: int
    skipped: tuple[tuple[str, int], ...] = ()

    @property
    def skipped_total(self) -> int:
        return sum(n for _, n in self.skipped)


# --- reading ------------------------------------------------------------------------------------------------


class _RowError(Exception):
    def __init__(self, path: str, message: str) -> None:
        self.path, self.message = path, message
        super().__init__(message)


def dataset_error(source: str, message: str, line: int | None = None) -> ConfigError:
    """A usage error (exit 2) in dataset `source`, at `line` when known."""
    return ConfigError([ConfigIssue("", message, line)], source)


def read_dataset(path: str | Path) -> Dataset:
    """Every row of the file at ``path``, checked; raises ``ConfigError`` listing the malformed ones."""
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise dataset_error(source, f"cannot read the dataset: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise dataset_error(source, f"not UTF-8 text (byte {exc.start}: {exc.reason})", line) from None
    start = _skip_space(text, 0)
    if start == len(text):
        raise dataset_error(source, "the file is empty; expected a JSON list of rows or one JSON row per line (JSONL)")
    issues: list[ConfigIssue] = []
    rows = _json_list_rows(text, start, source) if text[start] == "[" else _jsonl_rows(text, source, issues)
    records: list[DatasetRecord] = []
    skipped: Counter[str] = Counter()
    for index, (line, prefix, value) in enumerate(rows):
        try:
            record = _record(value, line, index)
        except _RowError as exc:
            issues.append(ConfigIssue(_join(prefix, exc.path), exc.message, line))
            continue
        if isinstance(record, str):
            skipped[record] += 1
        else:
            records.append(record)
    if issues:
        shown = sorted(issues, key=lambda issue: issue.line or 0)[:_MAX_ISSUES]
        if len(issues) > len(shown):
            shown.append(ConfigIssue("", f"... and {len(issues) - len(shown)} more malformed row(s) not shown"))
        raise ConfigError(shown, source)
    if not rows:
        raise dataset_error(source, "the dataset has no rows")
    if not records:
        raise dataset_error(source, f"no usable rows: all {len(rows)} skipped ({count_summary(skipped)})")
    return Dataset(source, tuple(records), len(rows), tuple(sorted(skipped.items())))


def _json_list_rows(text: str, start: int, source: str) -> list[tuple[int, str, Any]]:
    """The elements of a top-level JSON list, each with the line it starts on (the standard decoder, one element
    at a time, since orjson reports no positions)."""
    decoder = json.JSONDecoder()
    rows: list[tuple[int, str, Any]] = []
    line, seen = 1, 0

    def line_at(pos: int) -> int:
        nonlocal line, seen
        line += text.count("\n", seen, pos)
        seen = pos
        return line

    pos = _skip_space(text, start + 1)
    if text.startswith("]", pos):
        pos += 1
    else:
        while True:
            try:
                value, end = decoder.raw_decode(text, pos)
            except json.JSONDecodeError as exc:
                raise dataset_error(source, f"invalid JSON: {exc.msg}", exc.lineno) from None
            except RecursionError:
                raise dataset_error(source, "invalid JSON: nested too deeply", line_at(pos)) from None
            rows.append((line_at(pos), f"[{len(rows)}]", value))
            pos = _skip_space(text, end)
            if text.startswith(",", pos):
                pos = _skip_space(text, pos + 1)
            elif text.startswith("]", pos):
                pos += 1
                break
            else:
                raise dataset_error(source, "invalid JSON: expected ',' or ']' after a row of the list", line_at(pos))
    pos = _skip_space(text, pos)
    if pos != len(text):
        raise dataset_error(source, "invalid JSON: more data after the list", line_at(pos))
    return rows


def _skip_space(text: str, pos: int) -> int:
    match = _JSON_SPACE.match(text, pos)  # matches the empty string at worst
    return pos if match is None else match.end()


def _jsonl_rows(text: str, source: str, issues: list[ConfigIssue]) -> list[tuple[int, str, Any]]:
    rows: list[tuple[int, str, Any]] = []
    for number, raw in enumerate(text.split("\n"), 1):
        stripped = raw.strip()
        if not stripped:
            continue
        try:
            rows.append((number, "", orjson.loads(stripped)))
        except orjson.JSONDecodeError as exc:
            if not rows and _is_one_object(text):
                raise dataset_error(
                    source,
                    "the file is one JSON object spread over several lines; expected a JSON list of rows "
                    "or one JSON row per line (JSONL)",
                    number,
                ) from None
            column = exc.colno + len(raw) - len(raw.lstrip())
            issues.append(ConfigIssue("", f"invalid JSON at column {column}: {exc.msg}", number))
    return rows


def _is_one_object(text: str) -> bool:
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False


def _join(prefix: str, path: str) -> str:
    if not prefix or not path:
        return prefix or path
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


def count_summary(counts: Counter[str]) -> str:
    """ "3 reason a, 1 reason b": rows left out, by reason."""
    return ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))


# --- one row ------------------------------------------------------------------------------------------------


def _record(value: Any, line: int, index: int) -> DatasetRecord | str:
    """The row as a record, or the reason it is skipped; raises _RowError naming the first bad field."""
    if not isinstance(value, dict):
        raise _RowError("", f"expected an object (a row), got {describe_value(value)}")
    output_tokens = _output_tokens(value)
    if "conversations" in value:
        _check_spelling(value, ("conversations", "output_tokens"), "")
        return _sharegpt_record(value, line, index, output_tokens)
    _check_spelling(value, (*_SIMPLE_FIELDS, "conversations"), "")
    if "prompt" in value and "messages" in value:
        raise _RowError("", "has both 'prompt' and 'messages'; give one")
    if "prompt" in value:
        prompt = value["prompt"]
        if not isinstance(prompt, str) or not prompt:
            raise _RowError("prompt", f"expected a non-empty string, got {describe_value(prompt)}")
        return DatasetRecord(line, index, prompt, None, output_tokens, reference=_reference(value))
    if "messages" in value:
        return DatasetRecord(
            line, index, None, _messages(value["messages"]), output_tokens, reference=_reference(value)
        )
    fields = ", ".join(repr(key) for key in value) or "none"
    raise _RowError(
        "",
        "expected 'prompt' (a string), 'messages' (a list of {role, content}) or ShareGPT 'conversations'; "
        f"the row's fields: {fields}",
    )


def _reference(row: dict[str, Any]) -> Reference | None:
    try:
        return reference_of(row)
    except ValueError as e:
        raise _RowError(*e.args) from None


def _output_tokens(row: dict[str, Any]) -> int | None:
    value = row.get("output_tokens")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _RowError("output_tokens", f"expected a whole number >= 1, got {describe_value(value)}")
    if value < 1:
        raise _RowError("output_tokens", f"must be at least 1, got {value}")
    return value


def _check_spelling(obj: dict[str, Any], known: tuple[str, ...], path: str) -> None:
    for key in obj:
        if key in known or not isinstance(key, str):
            continue
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
        if close:
            raise _RowError(_join(path, key), f"unknown field; did you mean {close[0]!r}? (known: {', '.join(known)})")


def _messages(value: Any) -> tuple[Message, ...]:
    if not isinstance(value, list) or not value:
        raise _RowError("messages", f"expected a non-empty list of {{role, content}}, got {describe_value(value)}")
    out: list[Message] = []
    for j, item in enumerate(value):
        path = f"messages[{j}]"
        if not isinstance(item, dict):
            raise _RowError(path, f"expected an object with 'role' and 'content', got {describe_value(item)}")
        _check_spelling(item, _MESSAGE_FIELDS, path)
        role = _required(item, "role", path)
        if role not in ROLES:
            raise _RowError(f"{path}.role", f"expected one of {', '.join(ROLES)}, got {describe_value(role)}")
        content = _required(item, "content", path)
        if not isinstance(content, str):
            raise _RowError(f"{path}.content", f"expected a string, got {describe_value(content)}")
        out.append(Message(role, content))
    return tuple(out)


def _required(obj: dict[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        raise _RowError(f"{path}.{key}", "required field is missing")
    return obj[key]


def _sharegpt_record(row: dict[str, Any], line: int, index: int, output_tokens: int | None) -> DatasetRecord | str:
    turns_value = row["conversations"]
    if not isinstance(turns_value, list):
        raise _RowError("conversations", f"expected a list of {{from, value}} turns, got {describe_value(turns_value)}")
    turns: list[Message] = []
    for j, turn in enumerate(turns_value):
        path = f"conversations[{j}]"
        if not isinstance(turn, dict):
            raise _RowError(path, f"expected an object with 'from' and 'value', got {describe_value(turn)}")
        _check_spelling(turn, _TURN_FIELDS, path)
        speaker = _required(turn, "from", path)
        role = _SHAREGPT_ROLES.get(speaker) if isinstance(speaker, str) else None
        if role is None:
            raise _RowError(
                f"{path}.from",
                "expected one of human, gpt, system (or user, assistant, chatgpt, bing, bard), "
                f"got {describe_value(speaker)}",
            )
        text = _required(turn, "value", path)
        if not isinstance(text, str):
            raise _RowError(f"{path}.value", f"expected a string, got {describe_value(text)}")
        turns.append(Message(role, text))
    first_human = next((i for i, m in enumerate(turns) if m.role == "user"), None)
    if first_human is None:
        return _NO_HUMAN_TURN
    reply = next((i for i in range(first_human + 1, len(turns)) if turns[i].role == "assistant"), None)
    if reply is None:
        return DatasetRecord(line, index, None, tuple(turns), output_tokens)
    if output_tokens is not None:
        return DatasetRecord(line, index, None, tuple(turns[:reply]), output_tokens)
    words = len(turns[reply].content.split())
    return DatasetRecord(line, index, None, tuple(turns[:reply]), words or None, words > 0)


def approximate_tokens(texts: Iterable[str]) -> int:
    """Words across ``texts``: the stand-in for a token count when no tokenizer is configured."""
    return sum(len(text.split()) for text in texts)
