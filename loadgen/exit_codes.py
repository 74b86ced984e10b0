"""What a run's exit status means: the one definition the CLI, the Locust plugin and the report share."""

from __future__ import annotations

import signal
from enum import IntEnum

__all__ = ["ExitCode", "from_returncode", "signal_death"]


class ExitCode(IntEnum):
    OK = 0  # every SLO met
    SLO_BREACHED = 1  # an SLO breached (or a regression)
    USAGE = 2  # bad usage or configuration: nothing was run
    UNTRUSTWORTHY = 3  # target unreachable, nothing succeeded, or the load generator was the bottleneck
    # No valid verdict: the run crashed (a traceback, an unhandled exception in a greenlet or a user) or was cut
    # short (interrupted: Ctrl-C or SIGTERM, its report written with every worker's figures, `run.interrupted`).
    # A master killed by signal N exits 128 + N instead (the shell's convention), a failed run as well; so does
    # `loadgen run` stopped by a second Ctrl-C, which kills every process at once (130).
    RUN_FAILED = 4


def from_returncode(returncode: int) -> int:
    """A child's exit status as this process passes it on: a death by signal N (`Popen.returncode` -N) becomes
    128 + N, as a shell reports it; `sys.exit(-9)` would exit 247, which means nothing."""
    return 128 - returncode if returncode < 0 else returncode


def signal_death(returncode: int) -> str | None:
    """'signal 9 (SIGKILL)' for a child killed by a signal (returncode -N, or 128 + N passed on), else None."""
    n = -returncode if returncode < 0 else returncode - 128 if 128 < returncode < 128 + 65 else 0
    if not n:
        return None
    try:
        return f"signal {n} ({signal.Signals(n).name})"
    except ValueError:
        return f"signal {n}"
