"""What crashed in this process during a run: every unhandled exception in a greenlet, and every exception Locust's
event hooks swallowed. A run with any of them failed (exit 4): some of its work silently stopped — a user that
never ran, a dispatcher or a recorder that died, a report listener that raised — so its figures are no verdict.

Two places see them. gevent hands every exception that ends a greenlet to its hub's `handle_error` (which prints
it); the hub's documented hook is an attribute of that name on the hub instance, which `CrashLog.install` wraps.
Locust's `EventHook.fire` catches what a listener raises, logs "Uncaught exception in event handler" and only sets
a process-wide flag (`locust.log.unhandled_greenlet_exception`, which Locust turns into exit 2, "bad
configuration", unless an exit code was set); a logging handler reads those records. The flag itself is the last
resort, for a path that neither saw. Exceptions Locust catches in a user's task are not crashes: they are
`runner.exceptions` (the user goes on), which make the run untrustworthy instead (locust_plugin/live_state.py).
"""

from __future__ import annotations

import logging
import traceback
from types import TracebackType
from typing import Any

import gevent
from locust import log as locust_log

__all__ = ["CrashLog"]

# Distinct crashes kept per process (a user class whose on_start raises crashes once per user: one entry, counted).
_MAX_ENTRIES = 20
_EVENT_HANDLER = "Uncaught exception in event handler"


def _where(tb: TracebackType | None) -> str:
    frames = traceback.extract_tb(tb) if tb is not None else []
    if not frames:
        return ""
    f = frames[-1]
    return f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}"


class _HandlerRecords(logging.Handler):
    def __init__(self, log: CrashLog) -> None:
        super().__init__(logging.ERROR)
        self._log = log

    def emit(self, record: logging.LogRecord) -> None:
        try:
            if not str(record.msg).startswith(_EVENT_HANDLER):
                return
            text = str(record.args[0]) if isinstance(record.args, tuple) and record.args else record.getMessage()
            lines = [ln for ln in text.strip().splitlines() if ln.strip()]
            files = [ln.strip() for ln in lines if ln.strip().startswith("File ")]
            where = files[-1].replace("File ", "", 1) if files else ""
            self._log.add(f"in an event listener: {lines[-1].strip() if lines else 'an exception'}", where)
        except Exception:  # noqa: BLE001 - a logging handler must never raise
            pass


class CrashLog:
    """This process's crashes since `clear()`: entries {what, where, count}, in the order first seen."""

    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], dict[str, Any]] = {}
        self._flag_seen = bool(locust_log.unhandled_greenlet_exception)
        self._installed = False

    def install(self) -> None:
        """Start watching this process's hub and Locust's event hooks (once per process)."""
        if self._installed:
            return
        self._installed = True
        hub = gevent.get_hub()
        original = hub.handle_error

        def handle_error(context: Any, etype: Any, value: Any, tb: Any) -> None:
            try:
                crashed = isinstance(context, gevent.Greenlet) and isinstance(etype, type)
                if crashed and not issubclass(etype, (hub.NOT_ERROR, hub.SYSTEM_ERROR)):
                    self.add(f"in a greenlet: {etype.__name__}: {value}", _where(tb))
            except Exception:  # noqa: BLE001 - the hub's handler must never raise
                pass
            original(context, etype, value, tb)

        hub.handle_error = handle_error
        logging.getLogger().addHandler(_HandlerRecords(self))

    def add(self, what: str, where: str = "") -> None:
        what = what if len(what) <= 300 else what[:299] + "…"
        entry = self._entries.get((what, where))
        if entry is not None:
            entry["count"] += 1
        elif len(self._entries) < _MAX_ENTRIES:
            self._entries[(what, where)] = {"what": what, "where": where, "count": 1}

    def entries(self) -> list[dict[str, Any]]:
        """What crashed; a Locust flag raised with nothing seen here becomes one entry that says so."""
        out = [dict(e) for e in self._entries.values()]
        if not out and locust_log.unhandled_greenlet_exception and not self._flag_seen:
            out.append({"what": "an unhandled exception (Locust flagged it; see the process's log)", "where": ""})
            out[-1]["count"] = 1
        return out

    def pop(self) -> list[dict[str, Any]]:
        """The entries, then start afresh (a worker ships each crash once)."""
        out = self.entries()
        self.clear()
        return out

    def clear(self) -> None:
        """Forget what was seen (a new run starts): Locust's flag, set for the process's life, is taken as read."""
        self._entries = {}
        self._flag_seen = bool(locust_log.unhandled_greenlet_exception)
