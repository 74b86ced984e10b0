"""Servers the tests talk to, started and stopped whatever the test does: a real one as a child process (llama-server,
Prometheus, the Pushgateway), polled until it is ready; a fake one as a `ThreadingHTTPServer` on a thread."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["serving_process", "threaded_http"]


def _log_tail(path: Path) -> str:
    try:
        return path.read_text(errors="replace")[-2000:]
    except OSError:
        return ""


@contextmanager
def serving_process(
    cmd: list[str],
    log_path: Path,
    ready: Callable[[], bool],
    what: str,
    timeout_s: float = 30.0,
    poll_s: float = 0.3,
    stop_timeout_s: float = 10.0,
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """`cmd` running, its output in `log_path`, once `ready()` is true (an OSError counts as not yet); stopped with
    SIGTERM (SIGKILL after `stop_timeout_s`) when the block ends. A server that exits or is not ready in `timeout_s`
    fails the test with the end of its log. `env`: the child's environment (None: this process's)."""
    log = log_path.open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            assert proc.poll() is None, f"{what} exited with {proc.returncode}:\n{_log_tail(log_path)}"
            try:
                if ready():
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"{what} not ready in {timeout_s:g} s:\n{_log_tail(log_path)}"
            time.sleep(poll_s)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=stop_timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@contextmanager
def threaded_http(handler: type[BaseHTTPRequestHandler]) -> Iterator[ThreadingHTTPServer]:
    """`handler` served on 127.0.0.1 (a free port: `server_address[1]`) from a daemon thread, until the block ends."""
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
