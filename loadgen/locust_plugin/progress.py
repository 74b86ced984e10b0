"""The headless run's status line on the master (or a local process), every `--loadgen-progress` seconds.

Where it goes: `--loadgen-progress-fd` (default 2, this process's stderr). `loadgen run` sends Locust's own output
to log files in the report folder, so it hands its master a duplicate of its own stderr's descriptor instead: the
line reaches the user's terminal (or CI log) while Locust's logging stays in locust-master.log. On a terminal the
line is redrawn in place, elsewhere printed as plain lines (live/progress.py). Workers never print one: the master
has the merged numbers.
"""

from __future__ import annotations

import contextlib
import os
import time
from typing import IO, Any

import gevent
from locust.env import Environment

from loadgen.live.progress import final_newline, progress_line, render
from loadgen.locust_plugin.live_state import live_summary
from loadgen.locust_plugin.runtime import runtime_of
from loadgen.measure.collector import Collector

__all__ = ["add_progress_arguments", "start_progress"]

DEFAULT_PERIOD_S = 5.0
_DEFAULT_COLUMNS = 120


def add_progress_arguments(group: Any) -> None:
    group.add_argument(
        "--loadgen-progress",
        type=float,
        env_var="LOADGEN_PROGRESS",
        default=DEFAULT_PERIOD_S,
        help="headless runs: a status line every this many seconds on the master (0: none)",
    )
    group.add_argument(
        "--loadgen-progress-fd",
        type=int,
        env_var="LOADGEN_PROGRESS_FD",
        default=2,
        help="file descriptor the status line goes to (default 2, stderr)",
    )


def _total_s(environment: Environment) -> float | None:
    opts = environment.parsed_options
    if opts is not None and getattr(opts, "run_time", None):
        return float(opts.run_time)
    load = runtime_of(environment).scenario.load
    if load.stages is not None:
        return float(sum(st.duration for st in load.stages))
    return float(load.duration)


def _open(fd: int) -> IO[str] | None:
    try:
        # A duplicate, so closing this stream at the run's end leaves the descriptor itself alone.
        return os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace")
    except OSError:
        return None


def _columns(out: IO[str]) -> int:
    """The width of the terminal the line goes to (not this process's stdout, which is a log file)."""
    try:
        return os.get_terminal_size(out.fileno()).columns or _DEFAULT_COLUMNS
    except OSError:
        return _DEFAULT_COLUMNS


def start_progress(environment: Environment, col: Collector) -> gevent.Greenlet | None:
    """Spawn the status line's greenlet for the run `col` belongs to; it ends when that run is over."""
    opts = environment.parsed_options
    period = float(getattr(opts, "loadgen_progress", DEFAULT_PERIOD_S) or 0)
    if period <= 0:
        return None
    out = _open(int(getattr(opts, "loadgen_progress_fd", 2)))
    if out is None:
        return None
    return gevent.spawn(_loop, environment, col, out, period)


def _loop(environment: Environment, col: Collector, out: IO[str], period: float) -> None:
    tty = out.isatty()
    # A terminal gets a redraw every second (a bar that moves), a log a line every `period`.
    step = min(period, 1.0) if tty else period
    total = _total_s(environment)
    started = time.monotonic()
    wrote = False
    rt = runtime_of(environment)
    try:
        while True:
            gevent.sleep(step)
            if rt.collector is not col or col.flushed or col.stopped_wall is not None:
                break
            runner = environment.runner
            users = runner.user_count if runner is not None else None
            elapsed = time.monotonic() - started
            text = progress_line(live_summary(environment), elapsed, total, users)
            columns = _columns(out) if tty else 0
            out.write(render(text, elapsed, total, tty, columns))
            out.flush()
            wrote = True
    except OSError:  # the terminal went away: the run goes on without its status line
        return
    finally:
        with contextlib.suppress(OSError):
            if wrote:
                out.write(final_newline(tty))
            out.close()
