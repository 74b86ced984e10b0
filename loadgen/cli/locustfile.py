"""`loadgen locustfile`: the path of loadgen's locustfile, for `locust -f` (the web UI, Locust's own flags)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_locustfile_parser", "cmd_locustfile"]


def add_locustfile_parser(sub: Any) -> None:
    sub.add_parser("locustfile", help="print the path of loadgen's locustfile, for `locust -f`")


def cmd_locustfile(args: argparse.Namespace) -> int:
    from loadgen.locust_plugin.launcher import LOCUSTFILE

    print(LOCUSTFILE)
    return 0
