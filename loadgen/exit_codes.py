"""What a `loadgen` command's exit status means: the one definition every command, the Locust plugin and the report
share. docs/reference/exit-codes.md is generated from it (scripts/gen-docs.py): each code's meaning, and per command
what gives each code. tests/integration/test_exit_codes.py runs every command of `GATES` into each of its codes.

The rule that decides between them: 1 when the *target* fell short (an SLO, a regression, a dead target, a run that
`stop_when` ended), 3 only when the *load generator itself* could not be trusted, 4 when the run or the command
failed and gives no verdict, 2 when what was asked is wrong (the message names it) and nothing was run.
"""

from __future__ import annotations

import signal
from collections.abc import Mapping
from enum import IntEnum

__all__ = [
    "BY_COMMAND",
    "EVERY_COMMAND",
    "GATES",
    "SIGNAL_BASE",
    "SIGNAL_MEANING",
    "ExitCode",
    "codes_of",
    "from_returncode",
    "signal_death",
]


class ExitCode(IntEnum):
    OK = 0
    SLO_BREACHED = 1
    USAGE = 2
    UNTRUSTWORTHY = 3
    RUN_FAILED = 4

    @property
    def meaning(self) -> str:
        """One line: what the code means for every command (BY_COMMAND: what gives it in each)."""
        return _MEANINGS[self]

    @property
    def label(self) -> str:
        """A few words for a banner or a table cell (a report's exit code in HTML)."""
        return _LABELS[self]


_LABELS: Mapping[ExitCode, str] = {
    ExitCode.OK: "all SLOs met",
    ExitCode.SLO_BREACHED: "breached",
    ExitCode.USAGE: "bad usage or configuration",
    ExitCode.UNTRUSTWORTHY: "the load generator was not trustworthy",
    ExitCode.RUN_FAILED: "the run failed: no verdict",
}

_MEANINGS: Mapping[ExitCode, str] = {
    ExitCode.OK: "every SLO met (`compare`: no regression; `sweep`: every variant has a knee)",
    ExitCode.SLO_BREACHED: "an SLO breached or a regression; a dead or unreachable target, and a run `stop_when` "
    "ended, are breaches too: the target fell short, the load generator is fine",
    ExitCode.USAGE: "bad usage or configuration: nothing was run; the message names the field, the flag or the file",
    ExitCode.UNTRUSTWORTHY: "only the load generator itself could not be trusted (its event-loop lag, schedule slip "
    "or CPU past `run_trust`, or exceptions in its users' tasks): its figures may be its own, so no verdict",
    ExitCode.RUN_FAILED: "the run or the command failed, no verdict: a crash (one line on stderr, the traceback in "
    "a log file it names), a run cut short, a report that cannot be read or written",
}

SIGNAL_BASE = 128
SIGNAL_MEANING = (
    "killed by signal N, as a shell reports it (130: Ctrl-C, or a second Ctrl-C to `loadgen run`, which kills every "
    "process at once; 137: SIGKILL, e.g. the OOM killer; 143: SIGTERM)"
)

# The commands a pipeline gates on: each is run into each of its codes by tests/integration/test_exit_codes.py.
GATES = ("run", "report", "compare", "sweep", "k8s run")

# What gives a code in any command, beside what BY_COMMAND says for each.
EVERY_COMMAND: Mapping[ExitCode, str] = {
    ExitCode.USAGE: "an argument or flag the command line refuses (`--help` shows them)",
    ExitCode.RUN_FAILED: "an uncaught exception: one line on stderr, the traceback in a log file it names "
    "(loadgen/cli/crash.py)",
}

# Per command, what gives each code it can give (with EVERY_COMMAND's). `loadgen sim` is a test server, not a gate.
BY_COMMAND: Mapping[str, Mapping[ExitCode, str]] = {
    "run": {
        ExitCode.OK: "every SLO met",
        ExitCode.SLO_BREACHED: "an SLO breached; a target unreachable before load, or dead during the run (no request "
        "succeeded, or none completed in the window); a run `stop_when` ended early; open loop, more arrivals unsent "
        "than `load.max_not_sent_percent`",
        ExitCode.USAGE: "the scenario, a `--set`, a flag, a dataset, a tokenizer, a credential variable or a cluster "
        "Prometheus refused before any load",
        ExitCode.UNTRUSTWORTHY: "a worker's event-loop lag, schedule slip or CPU past `run_trust`, or exceptions "
        "Locust caught in users' tasks",
        ExitCode.RUN_FAILED: "a crash (of `loadgen` itself, e.g. a report directory that cannot be written; of a "
        "greenlet, a user, the report), a master that wrote no report, or a run interrupted by Ctrl-C / SIGTERM "
        "(its report marked `run.interrupted`)",
    },
    "report": {
        ExitCode.OK: "the report's verdict: every SLO met (or `--exit-zero`, once rendered)",
        ExitCode.SLO_BREACHED: "the report's verdict: a breach",
        ExitCode.USAGE: "a path that does not exist, a file that is not a loadgen report, no raw shards, a shard "
        "rebuild without `--scenario` or with a bad one",
        ExitCode.UNTRUSTWORTHY: "the report's verdict: the load generator was not trustworthy",
        ExitCode.RUN_FAILED: "the report's verdict: its run failed; or a loadgen report that cannot be read whole "
        "(truncated, corrupt, unreadable), or an `--out` that cannot be written",
    },
    "compare": {
        ExitCode.OK: "no regression",
        ExitCode.SLO_BREACHED: "a regression beyond `--max-regression` and outside noise (a variant, or a metric, "
        "of BASE missing in NEW counts as one)",
        ExitCode.USAGE: "a path that does not exist or is not a file, a file that is not a loadgen report (no "
        "`schema: loadgen.report/…`), a report of another schema version, a bad flag",
        ExitCode.UNTRUSTWORTHY: "either report's load generator was not trustworthy",
        ExitCode.RUN_FAILED: "no verdict can be given: either report is of a failed run (`run.failed`), or a file "
        "that says it is a loadgen report cannot be read whole (truncated, corrupt, unreadable); a `--json` that "
        "cannot be written",
    },
    "sweep": {
        ExitCode.OK: "every variant has a knee (a passing step before its first failing one)",
        ExitCode.SLO_BREACHED: "a variant never passed a step, or its target was unreachable before load",
        ExitCode.USAGE: "the scenario, the plan's flags or a step's scenario refused before any load",
        ExitCode.UNTRUSTWORTHY: "a step's load generator was not trustworthy",
        ExitCode.RUN_FAILED: "a step's run failed (a crash, no report, killed by a signal), or the sweep itself "
        "crashed",
    },
    "k8s run": {
        ExitCode.OK: "the run's verdict, from the master's report server: every SLO met",
        ExitCode.SLO_BREACHED: "the run's verdict: a breach",
        ExitCode.USAGE: "the scenario, a flag, a missing `--secret`, the `k8s` extra not installed, a kubeconfig that "
        "cannot be loaded, a selector that matches no Service; or the master refused its configuration",
        ExitCode.UNTRUSTWORTHY: "the run's verdict: the load generator was not trustworthy",
        ExitCode.RUN_FAILED: "the API server cannot be reached or refuses a call (e.g. a name already taken), the "
        "master ended without serving its reports or served none in time, or the run failed",
    },
    "validate": {
        ExitCode.OK: "the scenario is valid",
        ExitCode.USAGE: "it is not: the message names the field and its line",
    },
    "init": {
        ExitCode.OK: "the starter scenario was written",
        ExitCode.USAGE: "a server it cannot reach or does not know, a key it wants, several models and no "
        "`--model`, an `--out` that exists",
    },
    "demo": {
        ExitCode.OK: "the demo ran and wrote its report, whatever its SLOs say",
        ExitCode.UNTRUSTWORTHY: "the load generator was not trustworthy on this machine",
        ExitCode.RUN_FAILED: "the demo's run failed",
    },
    "trend": {
        ExitCode.OK: "the page was written (the reports' own verdicts are in it)",
        ExitCode.USAGE: "a file that is not a loadgen report of this schema version",
        ExitCode.RUN_FAILED: "a loadgen report that cannot be read whole",
    },
    "schema": {ExitCode.OK: "the schema was printed or written", ExitCode.USAGE: "a bad flag"},
    "locustfile": {ExitCode.OK: "the path was printed"},
    "k8s discover": {
        ExitCode.OK: "the variants were listed",
        ExitCode.USAGE: "a kubeconfig that cannot be loaded, or the `k8s` extra not installed",
        ExitCode.RUN_FAILED: "the API server cannot be reached or refuses a call",
    },
    "k8s coldstart": {
        ExitCode.OK: "the cold start was timed, the replicas restored",
        ExitCode.SLO_BREACHED: "the deployment did not scale down, come up Ready or answer a first token within "
        "`--timeout` (a dead target is a breach); the replicas restored",
        ExitCode.USAGE: "nothing was scaled: a deployment with 0 replicas, a bad flag, an answer waiting cannot "
        "change (401, 404, …)",
        ExitCode.RUN_FAILED: "the API server cannot be reached or refuses a call",
    },
}


def codes_of(command: str) -> str:
    """What gives each code in `command` (`run`, `k8s run`), as one paragraph for its `--help`."""
    by = {**EVERY_COMMAND, **BY_COMMAND[command]}
    said = "; ".join(f"{int(c)} {by[c]}" for c in sorted(by))
    return f"exit codes: {said}; 128+N killed by signal N (docs/reference/exit-codes.md)."


def from_returncode(returncode: int) -> int:
    """A child's exit status as this process passes it on: a death by signal N (`Popen.returncode` -N) becomes
    128 + N, as a shell reports it; `sys.exit(-9)` would exit 247, which means nothing."""
    return SIGNAL_BASE - returncode if returncode < 0 else returncode


def signal_death(returncode: int) -> str | None:
    """'signal 9 (SIGKILL)' for a child killed by a signal (returncode -N, or 128 + N passed on), else None."""
    n = -returncode if returncode < 0 else returncode - SIGNAL_BASE if SIGNAL_BASE < returncode < 193 else 0
    if not n:
        return None
    try:
        return f"signal {n} ({signal.Signals(n).name})"
    except ValueError:
        return f"signal {n}"
