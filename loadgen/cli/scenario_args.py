"""The scenario as the commands that load one read it: the file, the environment's settings over it, its
`--set key.path=value` overrides over those (validate, run, demo, sweep: config/precedence.py), and the copy the
Locust processes read when overrides changed it."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from loadgen.config.overrides import Override, parse_override
from loadgen.config.precedence import environment_overrides
from loadgen.config.scenario import ScenarioDocument, read_document

__all__ = ["AS_RUN", "add_set_argument", "overrides_of", "read_with_overrides", "write_as_run"]

# Beside the reports: the scenario a run with --set ran (what the Locust processes read, and the report records).
AS_RUN = "scenario-as-run.yaml"


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a scenario field, validated like the file (repeatable; VALUE is YAML): e.g. --set "
        "load.users=64, --set variants.0.base_url=http://host:8000 (or variants.NAME.base_url), "
        "--set 'traffic.mixes=[{name: chat}]'",
    )


def overrides_of(args: argparse.Namespace) -> list[Override]:
    """The command's `--set` flags, parsed; raises ``ConfigError`` naming a malformed one."""
    return [parse_override(text) for text in getattr(args, "set", None) or []]


def read_with_overrides(path: str | Path, args: argparse.Namespace) -> ScenarioDocument:
    """The scenario file with the environment's settings (`LOCUST_USERS`, `LOADGEN_DURATION`, …) then the
    command's `--set` flags applied (scenario file < environment < command line), not yet validated; raises
    ``ConfigError``."""
    return read_document(path).with_overrides([*environment_overrides(), *overrides_of(args)])


def write_as_run(doc: ScenarioDocument, report_dir: Path) -> Path:
    """``doc`` (overrides applied) written as ``report_dir/scenario-as-run.yaml``: the file the Locust processes
    load, so that they run exactly what was validated here."""
    report_dir.mkdir(parents=True, exist_ok=True)
    path = report_dir / AS_RUN
    flags = ", ".join(o.flag for o in doc.overrides)
    data: Any = doc.data
    header = f"# {doc.source} with {flags}: the scenario loadgen ran (written by loadgen, read by its processes)\n"
    path.write_text(header + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path
