"""Field types shared by the scenario's models (config.py, config_traffic.py): names, durations, token ranges."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field, WithJsonSchema

from loadgen.config.durations import parse_duration
from loadgen.config.errors import describe_value

__all__ = ["DURATION_PATTERN", "NAME_PATTERN", "Duration", "MixName", "PositiveFloat", "TokenRange"]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
DURATION_PATTERN = r"^\s*((\d+(\.\d*)?|\.\d+)(ms|h|m|s)?)+\s*$"


def _seconds(value: Any) -> float:
    return parse_duration(value)


def _token_range(value: Any) -> tuple[int, int]:
    # Checked by hand: pydantic's tuple errors ("Field required" at prompt_tokens[1]) don't say what to write.
    expected = "expected [min, max]: two whole numbers >= 1 with min <= max"
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise ValueError(f"{expected}, got {describe_value(value)}")
    lo, hi = value
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (lo, hi)):
        raise ValueError(f"{expected}, got {describe_value(list(value))}")
    if lo < 1 or hi < lo:
        raise ValueError(f"{expected}, got [{lo}, {hi}]")
    return (lo, hi)


Duration = Annotated[
    float,
    BeforeValidator(_seconds),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": DURATION_PATTERN},
            ]
        }
    ),
]
TokenRange = Annotated[
    tuple[int, int],
    BeforeValidator(_token_range),
    WithJsonSchema(
        {
            "type": "array",
            "prefixItems": [{"type": "integer", "minimum": 1}, {"type": "integer", "minimum": 1}],
            "minItems": 2,
            "maxItems": 2,
        }
    ),
]
PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)]
MixName = Annotated[str, Field(pattern=NAME_PATTERN)]
