"""The report server's guards, over real HTTP on 127.0.0.1: it binds loopback unless told otherwise, `GET /done`
needs the token when one is configured (LOADGEN_DONE_TOKEN) and is loopback-only without one, the run never sees
the token, and SIGTERM ends the serve window (or, during the run, keeps it shut) instead of waiting for SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from loadgen.locust_plugin.launcher import free_port
from loadgen.report.serve import DONE_TOKEN_ENV, DONE_TOKEN_HEADER, ReportServer, done_allowed

WRITE_REPORT = (
    "import os, pathlib, sys; d = pathlib.Path(sys.argv[1]); "
    "(d / 'seen-token.txt').write_text(os.environ.get('LOADGEN_DONE_TOKEN', '<unset>')); "
    "(d / 'report.json').write_text('{\"run\": {}, \"exit_code\": 0}')"
)


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _wait_listing(port: int, proc: subprocess.Popen[bytes] | None = None) -> dict[str, object]:
    deadline = time.monotonic() + 30
    while True:
        assert proc is None or proc.poll() is None, "the report server exited"
        try:
            return dict(json.loads(_get(f"http://127.0.0.1:{port}/")[1]))
        except OSError:
            assert time.monotonic() < deadline, "nothing served in 30 s"
            time.sleep(0.05)


def test_done_needs_the_token_when_one_is_configured(tmp_path: Path) -> None:
    server = ReportServer(tmp_path, exit_code=1, port=0, done_token="s3cr3t-t0ken")
    ended: list[bool] = []
    t = threading.Thread(target=lambda: ended.append(server.serve(30)))
    t.start()
    try:
        base = f"http://127.0.0.1:{server.port}"
        _wait_listing(server.port)
        assert _get(base + "/done")[0] == 403  # from loopback too: the token is what counts
        assert _get(base + "/done?token=wrong")[0] == 403
        assert _get(base + "/done", {DONE_TOKEN_HEADER: "s3cr3t-t0ke"})[0] == 403
        time.sleep(0.3)
        assert not server.done.is_set() and t.is_alive()  # still serving
        assert _get(base + "/done", {DONE_TOKEN_HEADER: "s3cr3t-t0ken"})[0] == 200
        t.join(10)
        assert ended == [True] and server.ended_by == "GET /done"
    finally:
        server.end("test over")
        t.join(10)


def test_done_by_query_token(tmp_path: Path) -> None:
    server = ReportServer(tmp_path, exit_code=0, port=0, done_token="abc123")
    t = threading.Thread(target=server.serve, args=(30,))
    t.start()
    try:
        _wait_listing(server.port)
        assert _get(f"http://127.0.0.1:{server.port}/done?token=abc123")[0] == 200
        t.join(10)
        assert not t.is_alive()
    finally:
        server.end("test over")
        t.join(10)


def test_without_a_token_done_is_loopback_only() -> None:
    assert done_allowed("127.0.0.1", None, "") and done_allowed("::1", None, None)
    assert done_allowed("::ffff:127.0.0.1", None, "")
    assert not done_allowed("10.1.2.3", None, "") and not done_allowed("fd00::1", "anything", "")
    assert not done_allowed("127.0.0.1", None, "tok") and done_allowed("10.1.2.3", "tok", "tok")


def test_the_default_bind_is_loopback(tmp_path: Path) -> None:
    server = ReportServer(tmp_path, exit_code=0, port=0)
    try:
        assert server._httpd.server_address[0] == "127.0.0.1"
    finally:
        server._httpd.server_close()
    r = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "run", "--help"], capture_output=True, text=True, timeout=60
    )
    assert "--serve-reports-host" in r.stdout


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _wrapper(
    tmp_path: Path, port: int, command: str, token: str | None = None, sigint_ignored: bool = False
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if k != DONE_TOKEN_ENV}
    if token:
        env[DONE_TOKEN_ENV] = token
    cmd = [sys.executable, "-m", "loadgen.report.serve", "--dir", str(tmp_path), "--for", "120s"]
    cmd += ["--port", str(port), "--", sys.executable, "-c", command, str(tmp_path)]
    # `sigint_ignored`: started as a shell's background job is (`cmd &` ignores SIGINT in what it starts).
    return subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_ignore_sigint if sigint_ignored else None,  # noqa: PLW1509 - nothing else runs threads here
    )


def test_sigterm_ends_the_serve_window_and_the_run_never_sees_the_token(tmp_path: Path) -> None:
    port = free_port()
    proc = _wrapper(tmp_path, port, WRITE_REPORT, token="tok-for-the-job")
    try:
        doc = _wait_listing(port, proc)
        assert doc["exit_code"] == 0
        assert (tmp_path / "seen-token.txt").read_text() == "<unset>"
        proc.send_signal(signal.SIGTERM)
        started = time.monotonic()
        assert proc.wait(10) == 0  # the run's code, at once: not 120 s later, not a SIGKILL
        assert time.monotonic() - started < 5
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("sigint_ignored", [False, True], ids=["foreground", "background-job"])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_the_run_reaches_it_and_no_window_opens(
    tmp_path: Path, sig: signal.Signals, sigint_ignored: bool
) -> None:
    """A wrapper started with SIGINT ignored (a background job) still hands the run SIGINT at its default: the
    forwarded Ctrl-C ends the run (it did not: the run ignored it and the wrapper waited its whole 60 s)."""
    port = free_port()
    marker = tmp_path / "running"
    command = f"import pathlib, time; pathlib.Path({str(marker)!r}).touch(); time.sleep(60)"
    proc = _wrapper(tmp_path, port, command, sigint_ignored=sigint_ignored)
    try:
        deadline = time.monotonic() + 30
        while not marker.exists():
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(sig)
        assert proc.wait(15) == 128 + sig  # the run killed by the signal it was given, and no 120 s window
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
