"""Serve a finished run's report directory read-only over HTTP for a bounded time (`loadgen run --serve-reports`).

On Kubernetes a headless run's master is a Job: when its process exits, the pod ends and its emptyDir with the
reports is gone. With ``--serve-reports SECONDS`` the master keeps answering ``GET /<file>`` for that long after the
run (or until ``GET /done``), then exits with the run's code, so ``kubectl port-forward job/NAME 8089`` (or a client
through the Service) can fetch report.json / .md / .html. No sidecar, nothing restarted: the Job completes with the
run's exit code either way. Only regular files directly in the directory are served; no listings beyond ``/``.

It binds 127.0.0.1 unless told otherwise (``--host``; `loadgen run --serve-reports-host`): on a laptop the reports
are not served to the LAN. The chart binds 0.0.0.0 (its NetworkPolicy decides who reaches the port). ``GET /done``
ends the serve window, so it takes a token when one is configured (``LOADGEN_DONE_TOKEN`` in the environment: the
chart fills it from a Secret it generates, `loadgen k8s run` generates one per run): ``?token=T`` or the header
``X-Loadgen-Done-Token: T``, else 403. With no token configured only a client on the loopback interface may end it.
SIGTERM or SIGINT ends the serve window at once (the exit code is still the run's).

``python -m loadgen.report.serve --dir D --for 10m -- COMMAND ...`` does the same after any command (the Helm chart's
headless master runs ``locust --master`` this way, its workers being other pods): it runs COMMAND, forwards SIGTERM
and SIGINT to it, serves D, and exits with the run's code: COMMAND's when it wrote its report in D with that code,
else the run failed — 4, or 128 + N when COMMAND was killed by signal N — with any report in D marked so
(report/failed_run.py; a COMMAND that exits 2 with no report refused its configuration, and that stays 2).
"""

from __future__ import annotations

import argparse
import hmac
import ipaddress
import json
import os
import signal
import subprocess
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

__all__ = ["DONE_TOKEN_ENV", "DONE_TOKEN_HEADER", "ReportServer", "done_allowed", "main", "serve_reports"]

DONE_TOKEN_ENV = "LOADGEN_DONE_TOKEN"
DONE_TOKEN_HEADER = "X-Loadgen-Done-Token"

_TYPES = {
    ".json": "application/json",
    ".md": "text/markdown; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".xml": "application/xml",
    ".csv": "text/csv; charset=utf-8",
    ".log": "text/plain; charset=utf-8",
    ".yaml": "text/plain; charset=utf-8",
}


def done_allowed(client_host: str, given: str | None, token: str | None) -> bool:
    """Whether a ``GET /done`` may end the serve window: with a configured ``token``, only when ``given`` equals it
    (compared in constant time); without one, only from the loopback interface."""
    if token:
        return given is not None and hmac.compare_digest(given.encode(), token.encode())
    try:
        return ipaddress.ip_address(client_host.removeprefix("::ffff:")).is_loopback
    except ValueError:
        return False


class ReportServer:
    """A stdlib HTTP server over one directory. ``GET /`` lists the files and the run's exit code as JSON,
    ``GET /<name>`` returns one file, ``GET /done`` ends the wait (see `done_allowed`; 403 otherwise). Anything else
    is 404; other methods 405. ``done_token`` None: read from ``LOADGEN_DONE_TOKEN`` (unset or empty: none)."""

    def __init__(
        self,
        directory: Path,
        exit_code: int,
        host: str = "127.0.0.1",
        port: int = 8089,
        done_token: str | None = None,
    ) -> None:
        self.directory = directory.resolve()
        self.exit_code = exit_code
        self.done_token = done_token if done_token is not None else os.environ.get(DONE_TOKEN_ENV, "")
        self.done = threading.Event()
        self.ended_by = ""
        self._httpd = ThreadingHTTPServer((host, port), self._handler())
        self._httpd.daemon_threads = True

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def files(self) -> list[str]:
        return sorted(p.name for p in self.directory.iterdir() if p.is_file())

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
                pass

            def _send(self, status: int, body: bytes, ctype: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                name, _, query = self.path.partition("?")
                name = name.lstrip("/")
                if name == "":
                    doc = {"exit_code": server.exit_code, "files": server.files()}
                    self._send(HTTPStatus.OK, json.dumps(doc).encode(), "application/json")
                    return
                if name == "done":
                    given = self.headers.get(DONE_TOKEN_HEADER) or next(iter(parse_qs(query).get("token", [])), None)
                    if not done_allowed(self.client_address[0], given, server.done_token):
                        why = b"a token is required\n" if server.done_token else b"only from the loopback interface\n"
                        self._send(HTTPStatus.FORBIDDEN, why, "text/plain; charset=utf-8")
                        return
                    self._send(HTTPStatus.OK, b"bye\n", "text/plain; charset=utf-8")
                    server.end("GET /done")
                    return
                # One path segment naming a regular file of the directory: no traversal, no subfolders.
                if "/" in name or "\\" in name or name.startswith(".") or name not in server.files():
                    self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8")
                    return
                path = server.directory / name
                ctype = _TYPES.get(path.suffix, "application/octet-stream")
                self._send(HTTPStatus.OK, path.read_bytes(), ctype)

            do_HEAD = do_GET  # noqa: N815

            def _refuse(self) -> None:
                self._send(HTTPStatus.METHOD_NOT_ALLOWED, b"read-only\n", "text/plain; charset=utf-8")

            do_POST = do_PUT = do_DELETE = do_PATCH = _refuse  # noqa: N815

        return Handler

    def end(self, why: str) -> None:
        """End the serve window now (from a request thread or a signal handler)."""
        if not self.done.is_set():
            self.ended_by = why
        self.done.set()

    def serve(self, seconds: float) -> bool:
        """Answer requests until ``/done`` (or `end`) or ``seconds`` passed; True when ended before the time."""
        thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        thread.start()
        try:
            return self.done.wait(seconds)
        finally:
            self._httpd.shutdown()
            self._httpd.server_close()
            thread.join(timeout=5)


def serve_reports(
    directory: Path,
    exit_code: int,
    seconds: float,
    port: int = 8089,
    host: str = "127.0.0.1",
    stop: threading.Event | None = None,
) -> int:
    """Serve ``directory`` for up to ``seconds`` (or until an allowed ``GET /done``, or SIGTERM / SIGINT when called
    from the main thread), then return ``exit_code``. ``stop`` already set (a SIGTERM during the run): no window."""
    if stop is not None and stop.is_set():
        print(f"loadgen: stopped by a signal: reports not served; the run's exit code is {exit_code}", flush=True)
        return exit_code
    server = ReportServer(directory, exit_code, host=host, port=port)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _f: server.end(signal.Signals(signum).name))
    done = "GET /done with the token" if server.done_token else "GET /done from this machine"
    print(
        f"loadgen: serving {directory} on http://{host}:{server.port}/ for up to {seconds:g}s "
        f"({done} to finish now); the run's exit code is {exit_code}",
        flush=True,
    )
    ended = server.serve(seconds)
    print(f"loadgen: report server closed ({server.ended_by if ended else 'time up'})", flush=True)
    return exit_code


def positive_seconds(text: str) -> float:
    """An argparse type: a duration (`90`, `15m`) above 0, in seconds."""
    from loadgen.config.durations import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m loadgen.report.serve",
        description="run COMMAND, then serve DIR read-only for up to --for (or until GET /done); exit with its code",
    )
    p.add_argument("--dir", required=True, type=Path, help="the report directory to serve")
    p.add_argument("--for", dest="seconds", required=True, type=positive_seconds, help="longest wait, e.g. 10m")
    p.add_argument("--port", type=int, default=8089, help="HTTP port (default 8089)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default 127.0.0.1; 0.0.0.0: all)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("a COMMAND after -- is required")
    stopped = threading.Event()
    given: list[int] = []  # the signals that stopped the run
    running: list[subprocess.Popen[bytes]] = []

    def forward(signum: int, _frame: object) -> None:
        # To the run while it runs; once it has exited there is nothing to forward to, and the window stays shut.
        stopped.set()
        given.append(signum)
        if running and running[0].poll() is None:
            running[0].send_signal(signum)

    # Caught before the run starts, so that the run starts with both at their defaults (exec resets a caught signal,
    # never an ignored one): a shell's background job ignores SIGINT, and a run that inherited that would ignore the
    # Ctrl-C forwarded to it, leaving this wrapper waiting on it.
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    if given:  # stopped before it started: nothing to run, no window
        return 128 + given[-1]
    # The token is the report server's alone: the run itself is not given it.
    child = subprocess.Popen(command, env={k: v for k, v in os.environ.items() if k != DONE_TOKEN_ENV})
    running.append(child)
    if given:  # a signal between the start and `running`: forwarded now
        child.send_signal(given[-1])
    returncode = child.wait()
    args.dir.mkdir(parents=True, exist_ok=True)
    from loadgen.report.failed_run import settle_run

    # A master that wrote no report (Locust's "gave up waiting for workers" exits 1: never "SLO breached"), or was
    # killed (-N: 128 + N, the shell's convention, apart from the verdict codes), failed the run.
    code, failed = settle_run(returncode, args.dir)
    if failed:
        print(f"loadgen: the run failed (exit {code}): {failed}", file=sys.stderr, flush=True)
    return serve_reports(args.dir, code, args.seconds, port=args.port, host=args.host, stop=stopped)


if __name__ == "__main__":
    sys.exit(main())
