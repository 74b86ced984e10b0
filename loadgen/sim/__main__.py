"""``python -m loadgen.sim``: run simulated variant servers until SIGTERM / SIGINT.

Once every server listens, exactly one JSON line goes to stdout, ``{"ready": true, "ports": {...}}``, so a parent
process (``launch.start_sim_process``, a test, a CI script) knows the ephemeral ports without parsing logs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from pathlib import Path

from loadgen.registry import UnknownNameError
from loadgen.sim.faults import fault_knobs, parse_fault_arg
from loadgen.sim.profiles import parse_set_arg, profile_registry
from loadgen.sim.server import SimCluster
from loadgen.sim.variant_spec import VariantSpec, parse_variant, with_faults, with_profile_changes


def build_parser() -> argparse.ArgumentParser:
    known = ", ".join(profile_registry().names())
    knobs = ", ".join(fault_knobs())
    p = argparse.ArgumentParser(
        prog="loadgen sim",
        description="Simulated LLM inference servers speaking the OpenAI, TGI and Ollama APIs (one port per variant).",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME[=PROFILE][:PORT]",
        help=f"a variant to serve (repeatable); PROFILE defaults to NAME, PORT 0 = ephemeral. Profiles: {known}",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--truth-log", type=Path, default=None, help="write ground-truth chunk times to this JSONL file")
    p.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="VARIANT:KNOB=VALUE",
        help=f"inject faults into a variant (repeatable), e.g. baseline:rate_429=0.2. Knobs: {knobs}",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="VARIANT:FIELD=VALUE",
        help="change a field of a variant's profile (repeatable), e.g. a:max_num_seqs=4 or "
        "a:scheduling_policy=priority (the body's `priority` orders the queue, lower first, as vLLM's "
        "--scheduling-policy priority)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the speculative-decoding and fault draws")
    p.add_argument("--log-level", default="WARNING", help="Python logging level for the simulator's own logs")
    return p


async def _serve(specs: list[VariantSpec], host: str, seed: int, truth_log: Path | None) -> None:
    cluster = SimCluster(specs, host=host, seed=seed, truth_log=truth_log)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        ports = await cluster.start()
        sys.stdout.write(json.dumps({"ready": True, "ports": ports}) + "\n")
        sys.stdout.flush()
        await stop.wait()
    finally:
        await cluster.close()  # flushes the truth log


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.variant:
        args.variant = ["baseline"]
    registry = profile_registry()
    try:
        specs = [parse_variant(v, registry) for v in args.variant]
        faults: dict[str, dict[str, float]] = {}
        for text in args.fault:
            variant, knob, value = parse_fault_arg(text)
            faults.setdefault(variant, {})[knob] = value  # a repeated knob: the last one wins, as usual for flags
        specs = with_faults(specs, faults)
        changes: dict[str, dict[str, str]] = {}
        for text in args.set:
            name, key, setting = parse_set_arg(text)
            changes.setdefault(name, {})[key] = setting
        specs = with_profile_changes(specs, changes)
    except (UnknownNameError, ValueError) as e:
        print(f"loadgen sim: {e}", file=sys.stderr)
        return 2
    names = [s.name for s in specs]
    if len(set(names)) != len(names):
        print(f"loadgen sim: variant names must be unique, got {names}", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(specs, args.host, args.seed, args.truth_log))
    except OSError as e:  # port in use, address not available
        print(f"loadgen sim: cannot listen: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
