"""The verdict and what people and pipelines read: the canonical JSON report with SLO evaluation and exit code
(`build`), its Markdown rendering (`markdown`), the self-contained HTML report with charts (`html`, `html_charts`),
a sweep's curves and knees (`sweep`), and the trend of p50 / p99 across a series of reports (`trend`).

Stage 6 of a request's path. Pure: imports `loadgen.config` and `loadgen.measure`.

The names below are imported when first asked for (PEP 562), as the package's own: a command that needs one module
of this package (`loadgen run`'s parent reads a report file; it builds none) does not pay for `build`'s imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loadgen.lazy_names import lazy_names

if TYPE_CHECKING:
    from loadgen.exit_codes import ExitCode
    from loadgen.report.build import SCHEMA, build_report, exit_code, write_reports
    from loadgen.report.markdown import render_markdown

_HOME = {
    "ExitCode": "loadgen.exit_codes",
    "SCHEMA": "loadgen.report.build",
    "build_report": "loadgen.report.build",
    "exit_code": "loadgen.report.build",
    "render_markdown": "loadgen.report.markdown",
    "write_reports": "loadgen.report.build",
}
__all__ = [
    "ExitCode",
    "SCHEMA",
    "build_report",
    "exit_code",
    "render_markdown",
    "write_reports",
]


__getattr__, __dir__ = lazy_names(__name__, _HOME)
