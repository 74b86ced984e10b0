"""Serve a finished run's report directory read-only over HTTP for a bounded time (`loadgen run --serve-reports`).

On Kubernetes a headless run's master is a Job: when its process exits, the pod ends and its emptyDir with the
reports is gone. With ``--serve-reports SECONDS`` the master keeps answering ``GET /<file>`` for that long after the
run (or until ``GET /done``), then exits with the run's code, so ``kubectl port-forward job/NAME 8089`` (or a client
through the Service) can fetch report.json / .md / .html. No sidecar, nothing restarted: the Job completes with the
run's exit code either way. Only regular files directly in the directory are served; no listings beyond ``/``.

``python -m loadgen.report.serve --dir D --for 10m -- COMMAND ...`` does the same after any command (the Helm chart's
headless master runs ``locust --master`` this way, its workers being other pods): it runs COMMAND, forwards SIGTERM
and SIGINT to it, serves D, and exits with the run's code: COMMAND's when it wrote its report in D with that code,
else the run failed — 4, or 128 + N when COMMAND was killed by signal N — with any report in D marked so
(report/failed_run.py; a COMMAND that exits 2 with no report refused its configuration, and that stays 2).
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["ReportServer", "main", "serve_reports"]

_TYPES = {
    ".json": "application/json",
    ".md": "text/markdown; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".xml": "application/xml",
    ".csv": "text/csv; charset=utf-8",
    ".log": "text/plain; charset=utf-8",
    ".yaml": "text/plain; charset=utf-8",
}


class ReportServer:
    """A stdlib HTTP server over one directory. ``GET /`` lists the files and the run's exit code as JSON,
    ``GET /<name>`` returns one file, ``GET /done`` ends the wait. Anything else is 404; other methods 405."""

    def __init__(self, directory: Path, exit_code: int, host: str = "0.0.0.0", port: int = 8089) -> None:
        self.directory = directory.resolve()
        self.exit_code = exit_code
        self.done = threading.Event()
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
                name = self.path.split("?", 1)[0].lstrip("/")
                if name == "":
                    doc = {"exit_code": server.exit_code, "files": server.files()}
                    self._send(HTTPStatus.OK, json.dumps(doc).encode(), "application/json")
                    return
                if name == "done":
                    self._send(HTTPStatus.OK, b"bye\n", "text/plain; charset=utf-8")
                    server.done.set()
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

    def serve(self, seconds: float) -> bool:
        """Answer requests until ``/done`` or ``seconds`` passed; True when ``/done`` ended it."""
        thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        thread.start()
        try:
            return self.done.wait(seconds)
        finally:
            self._httpd.shutdown()
            self._httpd.server_close()
            thread.join(timeout=5)


def serve_reports(directory: Path, exit_code: int, seconds: float, port: int = 8089, host: str = "0.0.0.0") -> int:
    """Serve ``directory`` for up to ``seconds`` (or until ``GET /done``), then return ``exit_code``."""
    server = ReportServer(directory, exit_code, host=host, port=port)
    print(
        f"loadgen: serving {directory} on http://{host}:{server.port}/ for up to {seconds:g}s "
        f"(GET /done to finish now); the run's exit code is {exit_code}",
        flush=True,
    )
    ended_by_client = server.serve(seconds)
    print(f"loadgen: report server closed ({'GET /done' if ended_by_client else 'time up'})", flush=True)
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
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARG ...]")
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        p.error("a COMMAND after -- is required")
    child = subprocess.Popen(command)

    def forward(signum: int, _frame: object) -> None:
        child.send_signal(signum)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    returncode = child.wait()
    args.dir.mkdir(parents=True, exist_ok=True)
    from loadgen.report.failed_run import settle_run

    # A master that wrote no report (Locust's "gave up waiting for workers" exits 1: never "SLO breached"), or was
    # killed (-N: 128 + N, the shell's convention, apart from the verdict codes), failed the run.
    code, failed = settle_run(returncode, args.dir)
    if failed:
        print(f"loadgen: the run failed (exit {code}): {failed}", file=sys.stderr, flush=True)
    return serve_reports(args.dir, code, args.seconds, port=args.port)


if __name__ == "__main__":
    sys.exit(main())
