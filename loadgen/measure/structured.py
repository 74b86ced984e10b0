"""Structured output, judged: whether a reply a `response_format` asked for is what it asked for (`traffic.mixes[].
tools.response_format`), as vLLM's structured-output benchmark reports its "correct rate".

A server that constrains its decoding to the schema (vLLM's guided decoding, llama.cpp's grammars) should always
return a valid reply; one that ignores `response_format`, or a reply cut by `max_tokens` before its JSON closed,
does not. Each successful reply of a request that carried a response_format is one of:

- `valid`: it parses as JSON, an object for `json_object`, and matches the schema for `json_schema`;
- `not_json`: it does not parse (a truncated object, prose around it), or is not an object for `json_object`;
- `off_schema`: it parses but the schema rejects it.

Judged by the request's stream once the reply has ended (only these requests keep their text, so only they leave
the C read path), with one compiled validator per schema (the mix's schema is built once per run).
"""

from __future__ import annotations

from typing import Any

import orjson
from jsonschema.validators import validator_for

__all__ = ["VERDICTS", "StructuredJudge"]

VERDICTS: tuple[str, ...] = ("valid", "not_json", "off_schema")


class StructuredJudge:
    """Judges replies against `response_format` bodies, one compiled validator per schema object."""

    __slots__ = ("_validators",)

    def __init__(self) -> None:
        self._validators: dict[int, tuple[dict[str, Any], Any]] = {}

    def _validator(self, schema: dict[str, Any]) -> Any:
        hit = self._validators.get(id(schema))
        if hit is None or hit[0] is not schema:  # the schema object is the mix's own, kept for the run
            cls = validator_for(schema)
            hit = self._validators[id(schema)] = (schema, cls(schema))
        return hit[1]

    def judge(self, text: str, response_format: dict[str, Any]) -> str:
        """`valid`, `not_json` or `off_schema` for one reply's text."""
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            return "not_json"
        kind = response_format.get("type")
        if kind == "json_object":
            return "valid" if isinstance(value, dict) else "not_json"
        schema = (response_format.get("json_schema") or {}).get("schema")
        if kind != "json_schema" or not isinstance(schema, dict):
            return "valid"
        return "valid" if self._validator(schema).is_valid(value) else "off_schema"
