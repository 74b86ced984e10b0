"""What an exception no command caught becomes: one clear line on stderr, the traceback in a log file that line
names, and exit 4 (the command failed: no verdict), never Python's traceback and exit 1, which says "an SLO
breached" (loadgen/exit_codes.py). KeyboardInterrupt and SystemExit are not exceptions of this kind (BaseException):
Ctrl-C and an explicit exit keep their meaning.

The log goes to the temporary directory (`$TMPDIR`, else /tmp) as `loadgen-crash-<UTC time>-<random>.log`: the
report directory may be what failed. It holds what a bug report needs — `loadgen --version`'s line, the command, the
traceback — and not the command line's values (a `--set` may carry what should stay out of files).
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
import tempfile
import traceback
from collections.abc import Callable

from loadgen.exit_codes import ExitCode

__all__ = ["crash_line", "guarded"]

_MAX_MESSAGE = 400  # characters of the exception's message on the line (the log has all of it)


def _write_log(command: str, exc: BaseException, version: str) -> str | None:
    """The log's path, or None when no file could be written (then the traceback goes to stderr)."""
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    try:
        fd, path = tempfile.mkstemp(prefix=f"loadgen-crash-{stamp}-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"{version}\ncommand: loadgen {command}\n\n")
            f.write("".join(traceback.format_exception(exc)))
    except OSError:
        return None
    return path


def crash_line(command: str, exc: BaseException, log: str | None) -> str:
    """`loadgen: run failed: NotADirectoryError: [Errno 20] Not a directory: 'x' (traceback in /tmp/…log)`."""
    message = " ".join(str(exc).split()) or "(no message)"
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 1] + "…"
    where = f"traceback in {log}" if log else "traceback above: no log file could be written"
    return f"loadgen: {command} failed: {type(exc).__name__}: {message} ({where})"


def guarded(command: str, run: Callable[[], int], version: Callable[[], str]) -> int:
    """`run()`'s exit code; an exception it raises is logged (`version()` heads the log) and exits 4."""
    try:
        return run()
    except Exception as exc:  # every command's last resort: see the module's docstring
        log = _write_log(command, exc, version())
        if log is None:
            traceback.print_exception(exc, file=sys.stderr)
        print(crash_line(command, exc, log), file=sys.stderr, flush=True)
        return ExitCode.RUN_FAILED
