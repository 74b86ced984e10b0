"""Reading a report.json given on a command line (`report`, `compare`, `trend`): JSON, a loadgen report, of this
schema — and, when it cannot be read, whose fault that is (loadgen/exit_codes.py):

- exit 2, usage: what was given is not what the command reads — a path that does not exist or is a folder, a file
  that is not JSON and does not say it is a loadgen report, JSON without `schema: loadgen.report/…`, a report of
  another schema version. The command line is what to fix.
- exit 4, the command failed: the file is a loadgen report, given correctly, that cannot be read whole — the system
  refuses to read it (permissions, an I/O error), or it says it is a loadgen report (its `schema` near the start) and
  is not whole JSON (truncated, corrupt), or it lacks sections every report has. No verdict can come from it.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import orjson

from loadgen.exit_codes import ExitCode
from loadgen.report.build import SCHEMA

__all__ = ["ReportFileError", "incomplete", "read_report_file"]

_PREFIX = "loadgen.report/"
_USAGE_ERRNOS = {errno.ENOENT, errno.EISDIR, errno.ENOTDIR}  # the path names no file: what was typed is wrong


class ReportFileError(Exception):
    """A report file the command cannot use; the message names it, `exit_code` says whose fault (module doc)."""

    def __init__(self, message: str, exit_code: int = ExitCode.USAGE) -> None:
        super().__init__(message)
        self.exit_code = int(exit_code)


def _looks_like_a_report(data: bytes) -> bool:
    """A loadgen report writes its `schema` first: one whose start says so is a report, however it ends."""
    head = data[:512]
    return b'"schema"' in head and _PREFIX.encode() in head


def read_report_file(path: Path, error: type[ReportFileError], schema: str | None = SCHEMA) -> dict[str, Any]:
    """The report at `path`; `error` (naming the file, with its exit code) when it cannot be read, is not JSON, or
    is not a loadgen report of `schema` (None: of any version). The caller checks the sections it needs and raises
    `incomplete(path, error)` when one is missing."""
    try:
        data = path.read_bytes()
    except OSError as e:
        code = ExitCode.USAGE if e.errno in _USAGE_ERRNOS else ExitCode.RUN_FAILED
        raise error(f"{path}: cannot read it ({e.strerror or e})", code) from None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        if _looks_like_a_report(data):
            why = f"{path}: a loadgen report that is not whole JSON, truncated or corrupt ({e})"
            raise error(why, ExitCode.RUN_FAILED) from None
        raise error(f"{path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith(_PREFIX):
        raise error(f"{path}: not a loadgen report (no `schema: {_PREFIX}…` field)")
    if schema is not None and doc["schema"] != schema:
        raise error(f"{path}: report schema {doc['schema']!r}, this loadgen reads {schema!r}")
    return doc


def incomplete(path: Path, error: type[ReportFileError], what: str) -> ReportFileError:
    """A loadgen report of this version without a section every report has: corrupt, no verdict (exit 4)."""
    return error(f"{path}: not a complete loadgen report ({what})", ExitCode.RUN_FAILED)
