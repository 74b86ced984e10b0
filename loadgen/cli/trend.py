"""`loadgen trend REPORT…`: a series of report.json files (nightly runs) drawn into one HTML file (report/trend.py)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from loadgen.exit_codes import ExitCode
from loadgen.report.trend import TrendInputError, load_reports, render_trend, variant_names


def add_trend_parser(sub: Any) -> None:
    """Register `loadgen trend` on the CLI's subparsers."""
    t = sub.add_parser(
        "trend",
        help="p50/p99 per variant and metric across a series of report.json files (nightly runs), in one HTML file",
        description="Draws p50 and p99 of TTFT, ITL, TPOT and E2E, and output tokens/s, per variant across the "
        "reports, ordered by each report's generated_at (ties keep the order given), into one self-contained HTML "
        "file. Exit 0 once written (the reports' own verdicts are in the page); 2 when a file is not a loadgen "
        "report of this schema version; 4 when a report cannot be read whole.",
    )
    t.add_argument("reports", nargs="+", metavar="REPORT", help="report.json files")
    t.add_argument("--out", default="trend.html", help="the HTML file to write (default: trend.html)")


def cmd_trend(args: argparse.Namespace) -> int:
    try:
        series = load_reports([Path(p) for p in args.reports])
    except TrendInputError as e:
        print(f"loadgen trend: {e}", file=sys.stderr)
        return e.exit_code
    scenarios = {r.get("scenario") for _, r in series}
    if len(scenarios) > 1:
        print(f"loadgen trend: warning: reports of different scenarios: {sorted(map(str, scenarios))}", file=sys.stderr)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_trend(series), encoding="utf-8")
    print(f"Trend: {out} ({len(series)} reports, variants {', '.join(variant_names(series))})")
    return ExitCode.OK
