"""What a run's exit status means: the one definition the CLI, the Locust plugin and the report share."""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ExitCode"]


class ExitCode(IntEnum):
    OK = 0  # every SLO met
    SLO_BREACHED = 1  # an SLO breached (or a regression)
    USAGE = 2  # bad usage or configuration: nothing was run
    UNTRUSTWORTHY = 3  # target unreachable, nothing succeeded, or the load generator was the bottleneck
