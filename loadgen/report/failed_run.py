"""A run that failed, as the process that launched its master sees it: the exit code that says so, and the report
marked as failed — rebuilt from the raw shards when the master wrote none.

The master's own exit code is the run's only when it wrote its report and exited with that report's code. Else the
run failed and no verdict stands: a master that wrote no report (a traceback, Locust's own exit) is exit 4 — unless
it exited 2, refusing its configuration before any load; a master killed by signal N is 128 + N; a master whose
exit disagrees with its report crashed after writing it. What can be kept is: a report the master wrote is kept and
marked (`run.failed`, exit_code 4), and where it wrote none, the workers' raw shards (`--raw-records`) still hold
every request they finished, so the report is rebuilt from them (`report_from_records`) and marked the same way.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from loadgen.config.scenario import Scenario
from loadgen.exit_codes import ExitCode, from_returncode, signal_death
from loadgen.report.build import exit_code, write_reports

__all__ = ["mark_failed", "settle_run"]


def mark_failed(report: dict[str, Any], reason: str) -> dict[str, Any]:
    """Add `reason` to the report's `run.failed` and recompute its exit code (4)."""
    failed = report["run"].setdefault("failed", [])
    if reason not in failed:
        failed.append(reason)
    report["exit_code"] = int(exit_code(report))
    return report


def _read_report(report_dir: Path) -> dict[str, Any] | None:
    try:
        report = orjson.loads((report_dir / "report.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    return report if isinstance(report, dict) and isinstance(report.get("run"), dict) else None


def _shard_rows(raw_dir: Path, since: float) -> list[dict[str, Any]]:
    """The complete rows of the shards written since `since` (wall clock): a killed process may have cut its last
    line, and a shard from an earlier run in the same folder is not this run's."""
    rows: list[dict[str, Any]] = []
    for shard in sorted(raw_dir.rglob("records-*.jsonl")):
        try:
            if shard.stat().st_mtime < since:
                continue
            data = shard.read_bytes()
        except OSError:
            continue
        for line in data.split(b"\n")[:-1]:  # what follows the last newline is a row cut short
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(row, dict) and "id" in row:
                rows.append(row)
    return rows


def settle_run(
    returncode: int,
    report_dir: Path,
    scenario: Scenario | None = None,
    raw_dir: Path | None = None,
    since: float = 0.0,
    forced: bool = False,
) -> tuple[int, str | None]:
    """(the run's exit code, why it failed or None) from the master's `Popen.returncode` and what it left in
    `report_dir`; marks or rebuilds the report there (from `raw_dir`'s shards newer than `since`) when it failed.
    `forced`: the launcher killed every process on a second signal, whose -N `returncode` is."""
    code = from_returncode(returncode)
    death = signal_death(returncode) if returncode < 0 else None
    if forced and death is not None:
        death = f"a second {death} to loadgen run, which killed every process"
    report = _read_report(report_dir)
    if report is not None:
        if death is None and code == report.get("exit_code"):
            return code, None
        reason = (
            f"the master was killed by {death} after writing its report"
            if death
            else f"the master exited {code} after writing a report that says {report.get('exit_code')}: it crashed"
        )
        write_reports(mark_failed(report, reason), report_dir)
        return (code if death else ExitCode.RUN_FAILED), reason
    if death is None and code == ExitCode.USAGE:
        return code, None  # refused before any load (configuration): nothing was run
    reason = (
        f"the master was killed by {death} before writing its report"
        if death
        else f"the master exited {code} without writing a report"
    )
    rows = _shard_rows(raw_dir, since) if raw_dir is not None and scenario is not None else []
    if rows and scenario is not None:
        from loadgen.report.from_records import report_from_records

        rebuilt = report_from_records(scenario, rows)
        write_reports(mark_failed(rebuilt, reason + f"; rebuilt from {len(rows)} raw records"), report_dir)
    return (code if death else ExitCode.RUN_FAILED), reason
