"""`loadgen compare BASE.json NEW.json --max-regression 5%`: the nightly regression gate (loadgen/report/compare_gate.py
holds the statistics and their definitions)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from loadgen.exit_codes import ExitCode
from loadgen.report import compare_gate
from loadgen.report.compare import RESAMPLES
from loadgen.report.compare_gate import CompareInputError, compare_reports, load_compare_input, render_compare


def _description() -> str:
    paragraphs = (compare_gate.__doc__ or "").split("\n\n")
    return "\n\n".join(paragraphs[1:3])


def parse_percent(text: str) -> float:
    """'5%' or '5' -> 0.05."""
    t = text.strip().removesuffix("%").strip()
    try:
        v = float(t)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a percentage such as 5% , got {text!r}") from None
    if not 0 <= v < 1000:
        raise argparse.ArgumentTypeError(f"expected a percentage from 0 to 1000, got {text!r}")
    return v / 100.0


def add_compare_parser(sub: Any) -> None:
    cp = sub.add_parser(
        "compare",
        help="regression gate: each variant's p50/p99 and throughput in NEW vs BASE, with intervals (exit 1)",
        description=_description(),
    )
    cp.add_argument("base", help="the reference report.json (e.g. last night's)")
    cp.add_argument("new", help="the report.json to check")
    cp.add_argument(
        "--max-regression", type=parse_percent, default=0.05, help="worse by more than this is a regression (5%%)"
    )
    cp.add_argument("--json", default=None, metavar="OUT", help="also write the comparison as JSON here")
    cp.add_argument("--resamples", type=int, default=RESAMPLES, help=f"bootstrap resamples (default {RESAMPLES})")
    cp.add_argument("--seed", type=int, default=None, help="bootstrap seed (default: BASE's scenario seed)")


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        base, new = load_compare_input(Path(args.base)), load_compare_input(Path(args.new))
    except CompareInputError as e:  # 2: not a report of this version; 4: a report that cannot be read whole
        print(f"loadgen: {e}", file=sys.stderr)
        return e.exit_code
    if args.resamples < 1:
        print(f"loadgen: --resamples must be at least 1, got {args.resamples}", file=sys.stderr)
        return ExitCode.USAGE
    result = compare_reports(base, new, args.max_regression, args.resamples, args.seed)
    sys.stdout.write(render_compare(result, args.base, args.new))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE))
    return int(result["exit_code"])
