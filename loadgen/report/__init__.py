"""The verdict and what people and pipelines read: the canonical JSON report with SLO evaluation and exit code
(`build`), its Markdown rendering (`markdown`), the self-contained HTML report with charts (`html`, `html_charts`),
a sweep's curves and knees (`sweep`), and the trend of p50 / p99 across a series of reports (`trend`).

Stage 6 of a request's path. Pure: imports `loadgen.config` and `loadgen.measure`.
"""

from loadgen.exit_codes import ExitCode
from loadgen.report.build import (
    SCHEMA,
    build_report,
    exit_code,
    write_reports,
)
from loadgen.report.markdown import render_markdown

__all__ = [
    "ExitCode",
    "SCHEMA",
    "build_report",
    "exit_code",
    "render_markdown",
    "write_reports",
]
