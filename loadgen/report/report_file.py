"""Reading a report.json given on a command line (`compare`, `trend`): JSON, a loadgen report, of this schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from loadgen.report.build import SCHEMA

__all__ = ["read_report_file"]


def read_report_file(path: Path, error: type[Exception]) -> dict[str, Any]:
    """The report at `path`; `error` (naming the file) when it cannot be read, is not JSON, or is not a loadgen
    report of this schema version. The caller checks the sections it needs."""
    try:
        doc = orjson.loads(path.read_bytes())
    except OSError as e:
        raise error(f"{path}: cannot read it ({e.strerror or e})") from None
    except orjson.JSONDecodeError as e:
        raise error(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or "schema" not in doc:
        raise error(f"{path}: not a loadgen report (no `schema` field)")
    if doc["schema"] != SCHEMA:
        raise error(f"{path}: report schema {doc['schema']!r}, this loadgen reads {SCHEMA!r}")
    return doc
