"""`loadgen demo`: the embedded simulator serving three variants, ~60 s of mixed load, and the report printed."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

from loadgen.cli.run import run_flags, run_scenario_file
from loadgen.cli.scenario_args import overrides_of
from loadgen.config.durations import format_duration, parse_duration
from loadgen.config.errors import ConfigError
from loadgen.config.overrides import Override
from loadgen.exit_codes import ExitCode

__all__ = ["DEMO_VARIANTS", "add_demo_parser", "cmd_demo"]

DEMO_VARIANTS = ("baseline", "int8", "spec-decode")


def add_demo_parser(sub: Any) -> None:
    d = sub.add_parser("demo", help="simulator with 3 variants + ~60 s of mixed load; prints the report")
    run_flags(d)


def _sets(args: argparse.Namespace) -> list[Override]:
    try:
        return overrides_of(args)[::-1]  # the last one wins
    except ConfigError:
        return []  # said by run_scenario_file, before any load


def _scale_warmup(doc: dict[str, Any], duration: Any) -> None:
    """A shorter demo (`--duration 10s`) keeps a quarter of its time for the warm-up, at most the file's 10 s: the
    warm-up must be shorter than the run. A duration that does not parse is left for the scenario check to name."""
    try:
        seconds = parse_duration(duration)
    except ValueError:
        return
    if seconds > 0:
        doc["load"]["warmup"] = format_duration(min(parse_duration(doc["load"]["warmup"]), seconds / 4))


def cmd_demo(args: argparse.Namespace) -> int:
    from importlib.resources import files

    from loadgen.sim.launch import start_sim_process

    report_dir = Path(args.report_dir or "loadgen-report")
    report_dir.mkdir(parents=True, exist_ok=True)
    doc = yaml.safe_load(files("loadgen").joinpath("examples/demo.yaml").read_text(encoding="utf-8"))
    print(f"loadgen demo: simulator with variants {', '.join(DEMO_VARIANTS)}", flush=True)
    with start_sim_process(list(DEMO_VARIANTS), seed=0) as sim:
        for v in doc["variants"]:
            v["base_url"] = sim.base_url(v["name"])
        scenario_path = report_dir / "demo-scenario.yaml"
        # --set (e.g. load.users=8) applies to this file as to any scenario: run_scenario_file validates it.
        sets = _sets(args)
        duration = args.duration or next((o.value for o in sets if o.keys == ("load", "duration")), None)
        if duration is not None and not any(o.keys == ("load", "warmup") for o in sets):
            _scale_warmup(doc, duration)
        scenario_path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        print(f"running {duration or doc['load']['duration']} of mixed chat/rag/code load …", flush=True)
        code = run_scenario_file(scenario_path, args)
    # The demo shows a report; SLO verdicts are in it, but only a broken run (2, 3, 4, 128 + N) fails the command.
    return 0 if code in (ExitCode.OK, ExitCode.SLO_BREACHED) else code
