"""Human-friendly durations ("250ms", "90s", "1m30s") for scenario files, as float seconds."""

from __future__ import annotations

import math
import re

__all__ = ["DURATION_FORMS", "format_duration", "parse_duration"]

# One part of a duration string; parts must come largest unit first, each at most once, so "30s1m" and "1m1m"
# (almost certainly typos) are rejected instead of silently summed.
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ms|h|m|s)")
_UNIT_SECONDS: dict[str, float] = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_UNIT_ORDER: tuple[str, ...] = ("h", "m", "s", "ms")
_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")

DURATION_FORMS = "seconds as a number, or a string like '250ms', '90s', '2m', '1h', '1m30s', '1.5s'"


def _invalid(value: object) -> ValueError:
    return ValueError(f"invalid duration {value!r}: expected {DURATION_FORMS}")


def parse_duration(value: float | int | str) -> float:
    """Return ``value`` in seconds. Numbers are seconds; strings take the unit suffixes h, m, s, ms.

    Raises ValueError (never TypeError, so pydantic reports it as a field error) for anything else,
    including negative, infinite and NaN values.
    """
    # bool is an int subclass, and `timeout: true` is a mistake, not one second.
    if isinstance(value, bool):
        raise _invalid(value)
    if isinstance(value, int | float):
        seconds = float(value)
        if math.isnan(seconds) or math.isinf(seconds):
            raise _invalid(value)
        if seconds < 0:
            raise ValueError(f"invalid duration {value!r}: must not be negative")
        return seconds
    if not isinstance(value, str):
        raise _invalid(value)
    text = value.strip().lower()
    if text.startswith("-"):
        raise ValueError(f"invalid duration {value!r}: must not be negative")
    if _NUMBER.fullmatch(text):
        return float(text)
    total = 0.0
    pos = 0
    last_rank = -1
    for match in _PART.finditer(text):
        if match.start() != pos:
            raise _invalid(value)
        rank = _UNIT_ORDER.index(match.group(2))
        if rank <= last_rank:
            raise _invalid(value)
        last_rank = rank
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos == 0 or pos != len(text):
        raise _invalid(value)
    return total


def format_duration(seconds: float) -> str:
    """The shortest string ``parse_duration`` reads back as ``seconds`` (to the millisecond): 90 -> "1m30s"."""
    if seconds < 0 or math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"cannot format duration {seconds!r}")
    millis = round(seconds * 1000)
    if millis == 0:
        return "0s"
    if millis < 1000:
        return f"{millis}ms"
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    parts = []
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}m")
    if rest:
        secs = rest / 1000
        parts.append(f"{secs:g}s")
    return "".join(parts)
