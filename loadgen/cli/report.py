"""`loadgen report PATH --format …`: re-render a report, or rebuild one from raw shards.

PATH is a report.json, a report folder holding one, or a folder of raw shards (`records-*.jsonl`): csv renders
the shards' rows; any other format from shards rebuilds the report first, which needs `--scenario`. The exit code
is the report's own verdict (loadgen/exit_codes.py), so a pipeline can gate on a re-render; `--exit-zero` renders
only. Bad input (not a report, no shards, a bad scenario) is exit 2, naming the file; a loadgen report that cannot
be read whole is exit 4 (loadgen/report/report_file.py says which is which).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from loadgen.exit_codes import ExitCode
from loadgen.report.formats import formats
from loadgen.report.report_file import ReportFileError, incomplete, read_report_file

__all__ = ["add_report_parser", "cmd_report"]


def add_report_parser(sub: Any) -> None:
    names = formats().names()
    rp = sub.add_parser(
        "report",
        help="re-render a report (or rebuild one from raw shards) as " + "|".join(names),
        description=__doc__.split("\n\n")[1],
    )
    rp.add_argument("path", help="report.json, a report folder, or a folder of raw shards (records-*.jsonl)")
    rp.add_argument("--format", default="md", choices=names, help="output format (default md)")
    rp.add_argument("--out", default=None, help="write here instead of standard output")
    rp.add_argument("--scenario", default=None, help="the scenario the shards were run with (rebuilding from shards)")
    rp.add_argument(
        "--raw-records",
        default=None,
        metavar="DIR",
        help="the run's raw shards, for a format that uses them (vllm-bench's per-request lists; default: shards "
        "under the report folder, if any)",
    )
    rp.add_argument("--exit-zero", action="store_true", help="exit 0 whatever the report's verdict (render only)")


class _Bad(ReportFileError):
    """Input the command cannot use; `exit_code` 2 (usage) unless a report cannot be read whole (4)."""


def _load_report(path: Path) -> dict[str, Any]:
    report = read_report_file(path, _Bad, schema=None)  # any version: rendering reads what it finds
    if not isinstance(report.get("run"), dict):
        raise incomplete(path, _Bad, "its run section")
    return report


def _read_shards(directory: Path) -> list[dict[str, Any]]:
    from loadgen.report.csv_records import read_shards

    try:
        return read_shards(directory)
    except ValueError as e:
        raise _Bad(str(e)) from None


def _rows_for(args: argparse.Namespace, path: Path) -> list[dict[str, Any]] | None:
    """The raw shards' rows for a format that uses them: --raw-records DIR, else shards under the report folder."""
    if args.raw_records:
        return _read_shards(Path(args.raw_records))
    if path.is_dir() and next(path.rglob("records-*.jsonl"), None) is not None:
        return _read_shards(path)
    return None


def _from_shards(
    directory: Path, fmt: str, scenario_path: str | None
) -> tuple[str | None, dict[str, Any] | None, list[dict[str, Any]]]:
    from loadgen.report.csv_records import render_csv

    rows = _read_shards(directory)
    if fmt == "csv":
        return render_csv(rows), None, rows
    if scenario_path is None:
        raise _Bad(f"{directory}: rebuilding a report from raw shards needs --scenario FILE (its SLOs and load)")
    from loadgen.config.errors import ConfigError
    from loadgen.config.scenario import load_scenario
    from loadgen.report.from_records import report_from_records

    try:
        scenario = load_scenario(scenario_path)
    except ConfigError as e:
        raise _Bad(str(e)) from None
    return None, report_from_records(scenario, rows), rows


def _render(args: argparse.Namespace) -> tuple[str, dict[str, Any] | None]:
    path = Path(args.path)
    fmt = formats().get(args.format)
    report: dict[str, Any] | None = None
    rows: list[dict[str, Any]] | None = None
    if path.is_dir() and (path / "report.json").exists() and fmt.render is not None:
        report = _load_report(path / "report.json")
    elif path.is_dir():
        text, report, rows = _from_shards(path, fmt.name, args.scenario)
        if text is not None:
            return text, None
    elif fmt.render is None:
        raise _Bad(f"{path}: {fmt.name} is rendered from raw shards: give the --raw-records folder")
    else:
        report = _load_report(path)
    assert report is not None and fmt.render is not None
    if fmt.render_records is not None:
        return fmt.render_records(report, rows if rows is not None else _rows_for(args, path)), report
    return fmt.render(report), report


def cmd_report(args: argparse.Namespace) -> int:
    try:
        text, report = _render(args)
    except _Bad as e:
        print(f"loadgen: {e}", file=sys.stderr)
        return e.exit_code
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if args.exit_zero or report is None:
        return ExitCode.OK
    return int(report.get("exit_code", ExitCode.OK))
