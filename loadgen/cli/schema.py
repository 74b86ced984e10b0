"""`loadgen schema [scenario|report]`: the JSON schema of a scenario file (what editors check and complete YAML
with) or of report.json. The package ships both files; `--out` writes one where a scenario's
`# yaml-language-server: $schema=…` line can point."""

from __future__ import annotations

import argparse
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

from loadgen.exit_codes import ExitCode

__all__ = ["SCHEMA_FILES", "add_schema_parser", "cmd_schema"]

# Shipped as package data; tests/unit/test_cli_schema.py fails when the scenario's is not what the model exports.
SCHEMA_FILES = {"scenario": "config/scenario.schema.json", "report": "report/report.schema.json"}


def add_schema_parser(sub: Any) -> None:
    s = sub.add_parser("schema", help="print the JSON schema of a scenario (default) or of report.json")
    s.add_argument("kind", nargs="?", choices=sorted(SCHEMA_FILES), default="scenario")
    s.add_argument("--out", default=None, metavar="FILE", help="write it to FILE instead of printing it")


def cmd_schema(args: argparse.Namespace) -> int:
    text = files("loadgen").joinpath(SCHEMA_FILES[args.kind]).read_text(encoding="utf-8")
    if args.out is None:
        sys.stdout.write(text)
        return ExitCode.OK
    out = Path(args.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
    except OSError as e:
        print(f"loadgen schema: --out {out}: {e.strerror or e}", file=sys.stderr)
        return ExitCode.USAGE
    print(f"{args.kind} schema: {out}")
    return ExitCode.OK
