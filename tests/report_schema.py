"""Every report a test reads is checked against the published schema (loadgen/report/report.schema.json)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "loadgen" / "report" / "report.schema.json"


@cache
def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def schema_errors(report: dict[str, Any]) -> list[str]:
    return [f"{e.json_path}: {e.message[:200]}" for e in _validator().iter_errors(report)]


def checked(report: dict[str, Any]) -> dict[str, Any]:
    """`report`, after asserting that it validates."""
    errors = schema_errors(report)
    assert not errors, "report does not match report.schema.json:\n" + "\n".join(errors[:20])
    return report
