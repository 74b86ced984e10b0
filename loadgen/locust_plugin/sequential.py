"""Sequential variants (`load.sequential: true`) through `loadgen run`: variants that share one GPU are run one after
another, each as a Locust run of its own with the whole load, then reported together. (A headless Locust run started
otherwise — the Helm chart's, `loadgen k8s run`'s — runs the same phases in its own processes: phases.py.)

Phase i runs variant i alone (`single_variant_doc`: the same document, the same seed, so the same request streams
and arrival offsets as every other phase: results still pair request by request), for the scenario's duration with
its warm-up, into `REPORT_DIR/phases/<i>-<variant>/`. `load.sequential_pause` is slept between phases. The phases'
aggregates then make one report in REPORT_DIR (`report.combine.combine_phases`), whose exit code is the run's. A
phase that wrote no report stops the run: what the phases before it measured is kept in their folders, and the
combined report is not written, since it would compare variants that did not all run.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import yaml

from loadgen.config.scenario import Scenario, load_scenario
from loadgen.config.variant_doc import single_variant_doc
from loadgen.exit_codes import ExitCode
from loadgen.locust_plugin.launcher import RunOptions, run_scenario, set_aside_reports
from loadgen.report.build import write_reports
from loadgen.report.combine import (
    AGGREGATE_FILE,
    Phase,
    combine_phases,
    phase_dir,
    read_aggregate,
    write_aggregate,
)

__all__ = ["phase_dir", "run_sequential"]


def _say(text: str) -> None:
    print(f"loadgen: {text}", file=sys.stderr, flush=True)


def run_sequential(sc: Scenario, raw: dict[str, Any], opts: RunOptions, report_dir: Path) -> int:
    """Run every variant of `sc` (validated from `raw`) in turn; write the combined report; return its exit code."""
    docs = []
    for i, v in enumerate(sc.variants):  # every phase's scenario is valid before any load
        out = phase_dir(report_dir, i, v.name)
        out.mkdir(parents=True, exist_ok=True)
        doc = single_variant_doc(raw, sc, i)
        doc["report_dir"] = str(out)
        path = out / "scenario.yaml"
        path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
        docs.append((v.name, out, path, load_scenario(path)))
    phases: list[Phase] = []
    pause = sc.load.sequential_pause
    for i, (name, out, path, phase_sc) in enumerate(docs):
        if i and pause > 0:
            _say(f"sequential: pausing {pause:g}s before variant {name!r}")
            time.sleep(pause)
        set_aside_reports(out)
        _say(f"sequential: variant {name!r} ({i + 1} of {len(docs)}) for {sc.load.duration:g}s …")
        phase_opts = replace(
            opts,
            scenario_path=path,
            report_dir=out,
            raw_records=None if opts.raw_records is None else opts.raw_records / name,
        )
        code = run_scenario(phase_sc, phase_opts)
        report_file, agg_file = out / "report.json", out / AGGREGATE_FILE
        if not (report_file.exists() and agg_file.exists()):
            _say(f"sequential: variant {name!r} wrote no report (exit {code}); see the logs in {out}/locust-*.log")
            return code or ExitCode.RUN_FAILED  # (a phase with no report failed: run_scenario settled its code)
        report = orjson.loads(report_file.read_bytes())
        if (report.get("run") or {}).get("interrupted"):
            # Ctrl-C / SIGTERM stops the run, not the phase: the variants after it are not run, and no combined
            # report holds a comparison of variants that did not all run (the phase's own report says what it got).
            rest = ", ".join(repr(d[0]) for d in docs[i + 1 :]) or "none"
            _say(f"sequential: interrupted during variant {name!r} (its report: {out}); not run: {rest}")
            return code or ExitCode.RUN_FAILED
        phases.append(Phase(name, report, read_aggregate(agg_file), str(out), code))
        _say(f"sequential: variant {name!r} done (exit {code})")
    combined, agg = combine_phases(sc, phases, pause)
    write_reports(combined, report_dir)
    write_aggregate(agg, report_dir)
    return int(combined["exit_code"])
