"""`--set key.path=value`: a scenario field set from the command line, applied to the raw document before validation.

The value is YAML (`64` is a number, `30s` a string, `[{name: chat}]` a list), so an override is validated exactly as
the same value written in the file. Path segments are mapping keys; in a list, a whole number is an index
(`variants.0.base_url`) and anything else picks the item whose `name` it is (`variants.canary.base_url`). A missing
mapping on the way is created (`metrics.prometheus.url=...` on a file without `metrics`); a list never grows. Whether
the field exists is the model's to say (unknown fields are errors), so a typo in a path fails validation naming the
path and the flag. Keys containing a dot cannot be set this way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import yaml

from loadgen.config.errors import ConfigError, ConfigIssue, format_path

__all__ = ["Override", "apply_overrides", "parse_override"]

_FLAG = "--set"


@dataclass(frozen=True, slots=True)
class Override:
    """One `--set`: ``text`` as given (``load.users=64``), its path segments and its parsed value. ``loc`` is the
    path it landed on once applied (a variant picked by name becomes its index), else empty. ``via``: the flag that
    gave it when not ``--set`` (``--duration`` is a ``load.duration`` override)."""

    text: str
    keys: tuple[str, ...]
    value: Any
    loc: tuple[str | int, ...] = ()
    via: str = ""

    @property
    def flag(self) -> str:
        """The flag as messages name it: its path, not its value (which may be a secret set in the wrong place)."""
        return self.via or f"{_FLAG} {'.'.join(self.keys)}"


def _refused(key: str, message: str) -> ConfigError:
    return ConfigError([ConfigIssue("", message)], f"{_FLAG} {key}")


def parse_override(text: str, via: str = "") -> Override:
    """``key.path=value`` with the value read as YAML; raises ``ConfigError`` naming the flag."""
    key, eq, raw = text.partition("=")
    key = key.strip()
    if not eq or not key:
        raise _refused(key, "expected key.path=value, e.g. --set load.users=64")
    keys = tuple(key.split("."))
    if any(not k for k in keys):
        raise _refused(key, f"empty segment in the path {key!r} (segments are separated by single dots)")
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        # The value is not echoed: it may be a secret set in the wrong place.
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise _refused(key, f"the value is not valid YAML: {problem}") from None
    return Override(text, keys, value, via=via)


def apply_overrides(data: Any, overrides: Sequence[Override], source: str) -> tuple[Any, tuple[Override, ...]]:
    """``data`` with each override set in turn (later ones win), copied along each path so that the caller's document
    (and YAML aliases sharing a node) stay as they were; and the overrides with ``loc`` filled in. A path that cannot
    be followed (through a number, past a list's end, to a name no item has) raises ``ConfigError``."""
    applied = []
    for override in overrides:
        data, loc = _set(data, override, source)
        applied.append(replace(override, loc=loc))
    return data, tuple(applied)


def _set(data: Any, override: Override, source: str) -> tuple[Any, tuple[str | int, ...]]:
    root: Any = dict(data) if isinstance(data, dict) else data
    if not isinstance(root, dict):
        raise ConfigError([ConfigIssue("", f"cannot apply {override.flag}: the scenario is not a mapping")], source)
    node: Any = root
    loc: tuple[str | int, ...] = ()
    for depth, key in enumerate(override.keys):
        last = depth == len(override.keys) - 1
        # In a list (the only other container entered), a key is an index or an item's name.
        step = key if isinstance(node, dict) else _index(node, key, loc, override, source)
        loc = (*loc, step)
        if last:
            node[step] = override.value
            break
        child = node.get(step) if isinstance(node, dict) else node[step]
        if child is None and override.keys[depth + 1].isdigit():
            # An absent list (e.g. slos: the model's defaults apply) has no items to change.
            item = override.keys[depth + 1]
            whole = f"--set {'.'.join(override.keys[: depth + 1])}=[...]"
            message = f"is not in the scenario, so it has no item {item}: set the whole list, {whole} ({override.flag})"
            raise ConfigError([ConfigIssue(format_path(loc), message)], source)
        if child is None:
            child = {}
        elif isinstance(child, dict | list):
            child = dict(child) if isinstance(child, dict) else list(child)  # copy on write
        else:
            message = f"is a single value, not a mapping or a list ({override.flag})"
            raise ConfigError([ConfigIssue(format_path(loc), message)], source)
        node[step] = child
        node = child
    return root, loc


def _index(items: list[Any], key: str, loc: tuple[str | int, ...], override: Override, source: str) -> int:
    if key.isdigit():
        if int(key) < len(items):
            return int(key)
        message = f"has {len(items)} item(s), none at index {key}: --set changes items, it adds none ({override.flag})"
    else:
        names = [item.get("name") if isinstance(item, dict) else None for item in items]
        if key in names:
            return names.index(key)
        known = ", ".join(str(n) for n in names if n is not None) or "none"
        message = f"has no item named {key!r} (names: {known}) ({override.flag})"
    raise ConfigError([ConfigIssue(format_path(loc), message)], source)
