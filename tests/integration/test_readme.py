"""The README's command blocks, run in order as a newcomer pastes them, in one empty folder.

`loadgen`, `locust` and `python` are this checkout's (tests/commands.py), and every module that only one of
loadgen's extras installs cannot be imported unless the README's own `pip install` line names that extra: what the
blocks run is what that line installs. Each block's marker (an HTML comment above it) says how it is run:

- `run`: in bash, `-e`: every command must exit 0. `given PATH`: a file the block expects (last night's report); the
  test puts there the newest report.json the session wrote.
- `background URL`: started (a server in a terminal of its own), the session goes on once URL answers; after the
  last block it is stopped with Ctrl-C (SIGINT) and must exit 0.
- `suite` and `cluster` are not run here: tests/unit/test_readme_commands.py checks that .ci/run runs the suite's
  command, and tests/k8s_chart/test_readme_cluster.py runs the cluster's against a stub API server.

`pip install` is not run (it would install into the test environment): a shim checks that it installs this checkout
(`.`) with extras that exist. `loadgen demo` and `loadgen run` get `--duration 5s` and looser run-trust bounds
appended (by the `loadgen` shim, the one change made to a command: tests/commands.py's LOOSE_TRUST
says why). ~40 s on an otherwise idle 2-core VM, ~90 s under other tests' load.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from tests.commands import (
    DIST,
    LOOSE_TRUST,
    ROOT,
    Block,
    block_commands,
    extras_only_modules,
    readme_blocks,
    shell_env,
)

README = ROOT / "README.md"
TEST_ARGS = f"--duration 5s {LOOSE_TRUST}"

_PIP_SHIM = """#!/bin/sh
# pip as the README test runs it: checks that `pip install -e .[extras]` installs this checkout, installs nothing.
exec {python} -c '
import sys
from importlib import metadata
args = sys.argv[1:]
assert args[:2] == ["install", "-e"] and len(args) == 3, f"pip: expected `pip install -e .[extras]`, got {{args}}"
spec = args[2]
assert spec == "." or (spec.startswith(".[") and spec.endswith("]")), f"pip: {{spec!r}} is not this checkout"
known = set(metadata.metadata("{dist}").get_all("Provides-Extra") or [])
asked = {{e.strip() for e in spec[2:-1].split(",")}} if spec != "." else set()
assert asked <= known, f"pip: no such extra {{sorted(asked - known)}}; extras: {{sorted(known)}}"
print(f"pip (README test): would install this checkout with extras {{sorted(asked)}}")
' "$@"
"""


def _pip_extras(blocks: list[Block]) -> list[str]:
    """The extras the README's `pip install -e ".[a,b]"` lines name."""
    extras: list[str] = []
    for b in blocks:
        for cmd in block_commands(b.code):
            m = re.fullmatch(r'pip install -e "?\.(?:\[([\w,-]+)\])?"?', cmd)
            if cmd.startswith("pip "):
                assert m, f"README line {b.line}: {cmd!r} is not `pip install -e .[extras]`"
                extras += (m.group(1) or "").split(",") if m.group(1) else []
    return extras


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _port_free(url: str) -> bool:
    parts = urlsplit(url)
    with socket.socket() as s:
        return s.connect_ex((parts.hostname or "127.0.0.1", parts.port or 80)) != 0


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else ""


def test_every_readme_block_runs_as_pasted(tmp_path: Path) -> None:
    blocks = readme_blocks(README.read_text(encoding="utf-8"))
    assert {b.kind for b in blocks} <= {"run", "background", "suite", "cluster"}, [(b.line, b.kind) for b in blocks]
    blocked = extras_only_modules(_pip_extras(blocks))
    assert {"kubernetes", "mkdocs", "selenium", "tokenizers"} <= blocked  # the extras' own, absent unless named
    env = shell_env(tmp_path, blocked=blocked, test_args=TEST_ARGS)
    pip = Path(env["PATH"].split(os.pathsep)[0]) / "pip"
    pip.write_text(_PIP_SHIM.format(python=shlex.quote(sys.executable), dist=DIST), encoding="utf-8")
    pip.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    servers: list[tuple[Block, subprocess.Popen[bytes], Path]] = []
    ran = []
    try:
        for i, b in enumerate(blocks):
            log = tmp_path / f"block-{i}-line-{b.line}.log"
            started = time.monotonic()
            if b.kind == "background":
                assert _port_free(b.arg), f"README line {b.line}: {b.arg} is taken already; free it and run again"
                with log.open("wb") as out:
                    proc = subprocess.Popen(
                        ["bash", "-c", b.code], cwd=work, env=env, stdout=out, stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )  # fmt: skip
                servers.append((b, proc, log))
                deadline = time.monotonic() + 60
                while not _answers(b.arg):
                    assert proc.poll() is None, f"README line {b.line} exited {proc.returncode}:\n{_tail(log)}"
                    assert time.monotonic() < deadline, f"README line {b.line}: {b.arg} silent for 60 s\n{_tail(log)}"
                    time.sleep(0.3)
                ran.append(b.line)
                print(f"README line {b.line}: {b.arg} answered after {time.monotonic() - started:.1f} s")
            elif b.kind == "run":
                if b.arg.startswith("given "):
                    given = work / b.arg.removeprefix("given ")
                    assert given.name == "report.json", f"README line {b.line}: no stand-in for {b.arg!r}"
                    newest = max(work.glob("**/report.json"), key=lambda p: p.stat().st_mtime)
                    given.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(newest, given)
                proc_run = subprocess.run(
                    ["bash", "-e", "-o", "pipefail", "-c", b.code], cwd=work, env=env, capture_output=True,
                    text=True, timeout=300,
                )  # fmt: skip
                log.write_text(proc_run.stdout + proc_run.stderr, encoding="utf-8")
                assert proc_run.returncode == 0, (
                    f"README line {b.line} exited {proc_run.returncode}:\n{b.code}\n"
                    f"{proc_run.stdout[-3000:]}\n{proc_run.stderr[-3000:]}"
                )
                ran.append(b.line)
                print(f"README line {b.line}: ran in {time.monotonic() - started:.1f} s")
    finally:
        stopped = []
        for b, proc, log in servers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in its terminal
            try:
                stopped.append((b.line, proc.wait(timeout=30), log))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                stopped.append((b.line, proc.wait(), log))
    bad = [(line, code, _tail(log)) for line, code, log in stopped if code != 0]
    assert bad == [], bad
    assert len(ran) == sum(b.kind in ("run", "background") for b in blocks)
    # What the blocks left: the demo's and the run's reports, the starter scenario, the JUnit file.
    assert (work / "scenario.yaml").exists() and (work / "junit.xml").exists()
    report = json.loads((work / "loadgen-report" / "report.json").read_text(encoding="utf-8"))
    assert report["scenario"] == "starter" and report["exit_code"] == 0
