"""Configuration errors: every problem found in a scenario, each with its field path and line, and the code
that turns YAML and pydantic errors into them (plain words, our field paths, the line of the closest node).

The CLI prints ``str(err)`` and exits with ``ConfigError.exit_code``, no traceback: the user needs the place and
the fix, not our stack.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from loadgen.exit_codes import ExitCode

__all__ = [
    "ConfigError",
    "ConfigIssue",
    "SubpathIssues",
    "compose_yaml",
    "describe_value",
    "duplicate_key_issues",
    "format_path",
    "in_file_order",
    "line_of",
    "translate_validation_error",
]


@dataclass(frozen=True, slots=True)
class ConfigIssue:
    """One problem: ``path`` like ``variants[0].dialect`` ("" for the whole file), 1-based ``line`` if known."""

    path: str
    message: str
    line: int | None = None

    def render(self, source: str) -> str:
        where = source if self.line is None else f"{source}:{self.line}"
        return f"{where}: {self.path}: {self.message}" if self.path else f"{where}: {self.message}"


class ConfigError(Exception):
    """A scenario that cannot be used; ``issues`` lists every problem found, in file order where known."""

    exit_code: ClassVar[int] = ExitCode.USAGE

    def __init__(self, issues: Sequence[ConfigIssue], source: str = "<string>") -> None:
        if not issues:
            raise ValueError("ConfigError needs at least one issue")
        self.issues: list[ConfigIssue] = list(issues)
        self.source = source
        super().__init__(self.__str__())

    def __str__(self) -> str:
        return "\n".join(issue.render(self.source) for issue in self.issues)


class SubpathIssues(ValueError):
    """Raised by validators that check several fields at once, so each issue points at the field it is about.

    Pydantic puts a model validator's error on the model itself; translate_validation_error appends each subpath.
    """

    def __init__(self, issues: list[tuple[tuple[str | int, ...], str]]) -> None:
        self.issues = issues
        super().__init__("; ".join(message for _, message in issues))


# --- from YAML and pydantic problems to issues --------------------------------------------------------------


def compose_yaml(text: str, source: str) -> tuple[yaml.Node, Any]:
    """Parse YAML keeping the node tree, whose marks give each value's line."""
    try:
        # The constructor already reads the stream and may reject characters.
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigIssue("", f"invalid YAML: {exc}")], source) from None
    try:
        root = loader.get_single_node()
        if root is None:
            raise ConfigError([ConfigIssue("", "the file is empty; a scenario needs at least 'variants'", 1)], source)
        return root, loader.construct_document(root)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = ": ".join(part for part in (exc.context, exc.problem) if part) or "invalid YAML"
        line = None if mark is None else mark.line + 1
        raise ConfigError([ConfigIssue("", f"invalid YAML: {message}", line)], source) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigIssue("", f"invalid YAML: {exc}")], source) from None
    except RecursionError:
        raise ConfigError([ConfigIssue("", "invalid YAML: nested too deeply")], source) from None
    finally:
        loader.dispose()


def duplicate_key_issues(root: yaml.Node) -> list[ConfigIssue]:
    # PyYAML keeps the last of two equal keys silently; in a config that hides an edit.
    issues: list[ConfigIssue] = []
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, tuple[str | int, ...]]] = [(root, ())]
    while stack:
        node, path = stack.pop()
        if id(node) in seen_nodes:  # aliases can make the node graph cyclic
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    if key_node.value in keys and key_node.value != "<<":
                        message = f"duplicate key {key_node.value!r}; only the last one would count"
                        full = (*path, key_node.value)
                        issues.append(ConfigIssue(format_path(full), message, key_node.start_mark.line + 1))
                    keys.add(key_node.value)
                    stack.append((value_node, (*path, key_node.value)))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((item, (*path, i)) for i, item in enumerate(node.value))
    return issues


def line_of(root: yaml.Node | None, loc: tuple[str | int, ...]) -> int | None:
    """Line of the deepest node on ``loc`` that exists (for a missing key: its parent mapping)."""
    if root is None:
        return None
    node = root
    line = root.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            # The last match: with duplicate keys, that is the value PyYAML kept.
            match = next(
                (kv for kv in reversed(node.value) if isinstance(kv[0], yaml.ScalarNode) and kv[0].value == str(part)),
                None,
            )
            if match is None:
                break
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def translate_validation_error(
    exc: ValidationError, model: type[BaseModel], root: yaml.Node | None
) -> list[ConfigIssue]:
    issues: list[ConfigIssue] = []
    for error in exc.errors():
        loc = tuple(error["loc"])
        inner = (error.get("ctx") or {}).get("error")
        if isinstance(inner, SubpathIssues):
            for subpath, message in inner.issues:
                full = (*loc, *subpath)
                issues.append(ConfigIssue(format_path(full), message, line_of(root, full)))
            continue
        if len(loc) >= 2 and loc[-1] == "[key]" and error["type"] not in ("extra_forbidden", "missing"):
            # An invalid mapping key (e.g. a custom mix name): pydantic appends "[key]" to the key's path.
            loc = loc[:-1]
            message = f"invalid name: {_message(error, loc, model)}"
        else:
            message = _message(error, loc, model)
        issues.append(ConfigIssue(format_path(loc), message, line_of(root, loc)))
    return issues


def _message(error: Any, loc: tuple[str | int, ...], model: type[BaseModel]) -> str:
    """A plain-words version of one pydantic error."""
    kind: str = error["type"]
    ctx: dict[str, Any] = error.get("ctx") or {}
    # Values under these keys may be secrets pasted in the wrong place: say what type they were, not what.
    hide = any(
        part in ("headers", "api_key_env", "headers_from_env", "bearer_token_env", "basic_auth_env") for part in loc
    )
    got = _kind(error.get("input")) if hide else describe_value(error.get("input"))
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        names = [f.alias or name for name, f in parent.model_fields.items()] if parent is not None else []
        known = f" (known: {', '.join(names)})" if parent is not None else ""
        return f"unknown field {loc[-1]!r}{known}"
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"expected a whole number, got {got}"
    if kind in ("float_type", "float_parsing"):
        return f"expected a number, got {got}"
    if kind == "finite_number":
        return "expected a finite number"
    if kind in ("bool_type", "bool_parsing"):
        return f"expected true or false, got {got}"
    if kind in ("string_type", "string_unicode"):
        return f"expected a string, got {got}"
    if kind in ("list_type", "tuple_type"):
        return f"expected a list, got {got}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"expected a mapping, got {got}"
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected')}, got {got}"
    if kind == "greater_than":
        return f"must be greater than {ctx.get('gt')}, got {got}"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}, got {got}"
    if kind == "string_pattern_mismatch":
        # No echo of the input: strings may hold secrets pasted in the wrong place.
        if loc and loc[-1] == "name":
            return "names are 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit"
        return f"must match the pattern {ctx.get('pattern')}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "too_short":
        return f"needs at least {ctx.get('min_length')} item(s)"
    if kind == "invalid_key":
        return "mapping keys must be strings"
    if kind == "recursion_loop":
        return "refers to itself (a recursive YAML anchor)"
    return str(error.get("msg", kind))


def describe_value(value: object) -> str:
    if value is None:
        return "null"
    text = repr(list(value) if isinstance(value, tuple) else value)
    if len(text) <= 40:
        return text
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return text[:37] + "..."


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return "null" if value is None else type(value).__name__


def format_path(loc: tuple[str | int, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z0-9_-]+", part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]"
    return out


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The model class validating the value at ``loc``, to list its field names."""
    annotation: Any = model
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return None
            annotation = field.annotation
        elif get_origin(annotation) is list and isinstance(part, int):
            annotation = get_args(annotation)[0]
        elif get_origin(annotation) is dict:
            annotation = get_args(annotation)[1]
        else:
            return None
    annotation = _unwrap(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _unwrap(annotation: Any) -> Any:
    if get_origin(annotation) is Annotated:
        return _unwrap(get_args(annotation)[0])
    args = get_args(annotation)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return _unwrap(rest[0]) if len(rest) == 1 else annotation
    return annotation


def in_file_order(issues: list[ConfigIssue]) -> list[ConfigIssue]:
    return sorted(issues, key=lambda issue: issue.line if issue.line is not None else 1 << 30)
