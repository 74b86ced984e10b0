"""`loadgen run --serve-reports`: the report directory is served read-only, then the run's exit code comes back."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from loadgen.report.serve import ReportServer


def _get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read(), r.headers.get("Content-Type", "")
    except urllib.error.HTTPError as e:
        return e.code, e.read(), e.headers.get("Content-Type", "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serves_files_refuses_the_rest_and_ends_on_done(tmp_path: Path) -> None:
    (tmp_path / "report.json").write_text('{"verdict": "fail"}', encoding="utf-8")
    (tmp_path / "report.md").write_text("# report\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "x.txt").write_text("no", encoding="utf-8")
    (tmp_path.parent / "secret.txt").write_text("outside", encoding="utf-8")
    server = ReportServer(tmp_path, exit_code=1, host="127.0.0.1", port=0)
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(server.serve(30)))
    t.start()
    base = f"http://127.0.0.1:{server.port}"
    for _ in range(50):
        try:
            status, body, _ = _get(base + "/")
            break
        except OSError:
            time.sleep(0.05)
    assert status == 200
    assert json.loads(body) == {"exit_code": 1, "files": ["report.json", "report.md"]}
    status, body, ctype = _get(base + "/report.json")
    assert (status, json.loads(body), ctype) == (200, {"verdict": "fail"}, "application/json")
    assert _get(base + "/report.md")[2].startswith("text/markdown")
    assert _get(base + "/../secret.txt")[0] == 404
    assert _get(base + "/%2e%2e/secret.txt")[0] == 404
    assert _get(base + "/sub/x.txt")[0] == 404
    assert _get(base + "/missing.html")[0] == 404
    req = urllib.request.Request(base + "/report.json", data=b"x", method="PUT")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=5)
    assert e.value.code == 405
    assert _get(base + "/done")[0] == 200
    t.join(10)
    assert result == [True]


def test_time_limit_ends_the_wait(tmp_path: Path) -> None:
    server = ReportServer(tmp_path, exit_code=0, host="127.0.0.1", port=0)
    started = time.monotonic()
    assert server.serve(0.3) is False
    assert 0.25 <= time.monotonic() - started < 5


def test_cli_serves_then_exits_with_the_runs_code(tmp_path: Path) -> None:
    """A real `loadgen run` whose target is unreachable (a breach, exit 1, before any load): the flag still serves the
    report dir, says the exit code at GET /, and the process exits 1 after GET /done."""
    dead = _free_port()
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        f"variants:\n  - name: a\n    base_url: http://127.0.0.1:{dead}\n    model: m\n", encoding="utf-8"
    )
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--workers", "0", "--quiet"]
        + ["--report-dir", str(tmp_path / "out"), "--serve-reports", "60s", "--serve-reports-port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        doc = None
        for _ in range(200):
            try:
                status, body, _ = _get(f"http://127.0.0.1:{port}/")
                doc = json.loads(body)
                break
            except OSError:
                time.sleep(0.05)
        assert doc == {"exit_code": 1, "files": []}
        assert _get(f"http://127.0.0.1:{port}/done")[0] == 200
        assert proc.wait(20) == 1
    finally:
        proc.kill()
        proc.wait()


def test_cli_refuses_a_bad_duration(tmp_path: Path) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "run", "x.yaml", "--serve-reports", "soon"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 2
    assert "--serve-reports" in r.stderr


def test_wrapper_runs_the_command_then_serves_its_code(tmp_path: Path) -> None:
    """The chart's headless master: `python -m loadgen.report.serve --dir D --for T -- COMMAND` exits with COMMAND's
    code after serving what COMMAND wrote (its report, with that code)."""
    port = _free_port()
    write = (
        "import pathlib, sys; d = pathlib.Path(sys.argv[1]); (d / 'report.md').write_text('# breached'); "
        "(d / 'report.json').write_text('{\"run\": {}, \"exit_code\": 1}'); sys.exit(1)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "loadgen.report.serve", "--dir", str(tmp_path), "--for", "60s", "--port", str(port)]
        + ["--", sys.executable, "-c", write, str(tmp_path)],
        stdout=subprocess.PIPE,
    )
    try:
        doc = None
        for _ in range(200):
            try:
                doc = json.loads(_get(f"http://127.0.0.1:{port}/")[1])
                break
            except OSError:
                time.sleep(0.05)
        assert doc == {"exit_code": 1, "files": ["report.json", "report.md"]}
        assert _get(f"http://127.0.0.1:{port}/report.md")[1] == b"# breached"
        _get(f"http://127.0.0.1:{port}/done")
        assert proc.wait(20) == 1
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.parametrize(
    ("command", "code"),
    [
        ("import sys; sys.exit(1)", 4),  # no report: the run failed (Locust's "gave up waiting for workers" is 1)
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 137),  # killed by signal 9: 128 + 9
        ("import sys; sys.exit(2)", 2),  # refused its configuration before any load
    ],
)
def test_wrapper_says_the_run_failed_when_the_command_wrote_no_report(tmp_path: Path, command: str, code: int) -> None:
    port = _free_port()
    r = subprocess.run(
        [sys.executable, "-m", "loadgen.report.serve", "--dir", str(tmp_path), "--for", "0.2s", "--port", str(port)]
        + ["--", sys.executable, "-c", command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == code, r.stderr
    assert ("the run failed" in r.stderr) == (code != 2)
