"""`loadgen validate FILE [--set key.path=value ...]`: check a scenario without sending a request; errors name the
field and line, or the `--set` flag (exit 2)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from loadgen.cli.scenario_args import add_set_argument, read_with_overrides
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import missing_secrets
from loadgen.exit_codes import ExitCode
from loadgen.preflight import checked

__all__ = ["add_validate_parser", "cmd_validate"]


def add_validate_parser(sub: Any) -> None:
    v = sub.add_parser("validate", help="check a scenario file; errors name the field and line (exit 2)")
    v.add_argument("file")
    add_set_argument(v)


def cmd_validate(args: argparse.Namespace) -> int:
    try:
        doc = read_with_overrides(args.file, args)
        # The model, then the checks that read files or ask the target (a dataset, the tokenizer); not the cluster
        # Prometheus, which a laptop or a CI job before deploy usually cannot reach (run checks it before load).
        sc = checked(doc, cluster=False)
    except ConfigError as e:
        print(e, file=sys.stderr)
        return ExitCode.USAGE
    # Only a warning here: validate may run where the run's secrets are not (a laptop, CI before deploy).
    for issue in missing_secrets(sc):
        print(f"warning: {issue.render(args.file)}", file=sys.stderr)
    given = f" with {', '.join(o.flag for o in doc.overrides)}" if doc.overrides else ""
    names = ", ".join(v.name for v in sc.variants)
    mixes = ", ".join(f"{m.name}×{m.weight:g}" for m in sc.traffic.mixes)
    print(
        f"{args.file}{given}: OK — scenario {sc.name!r}: variants [{names}], mixes [{mixes}], "
        f"{sc.load.users} users for {sc.load.duration:g}s (warm-up {sc.load.warmup:g}s), {len(sc.slos)} SLOs"
    )
    return 0
