"""`loadgen run`'s status line reaches the user's stderr although Locust's own output goes to the log files.

Through a pipe (a CI log): plain `loadgen: …` lines naming every variant; through a pseudo-terminal: one line redrawn
in place (`\\r`, a bar), ended before the report starts; `--quiet` and `--no-progress`: none. Each on the simulator,
a local process and a master with a worker, the period shortened to 1 s through LOADGEN_PROGRESS.
"""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadgen.sim.launch import start_sim_process

from .harness import write_scenario


@pytest.fixture(scope="module")
def sim() -> Iterator[Any]:
    with start_sim_process(["a=int8", "b=int8"]) as s:
        yield s


def _run(tmp: Path, sim: Any, *args: str, stderr: Any = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    # 6 s: a worker reports every 3 s from its own start, which the run's may follow closely, so its first figures
    # can reach the master ~3 s in; the lines at 4 and 5 s carry them (a 4 s run's last line, at 3 s, raced them).
    scenario = write_scenario(tmp / "s.yaml", {v: sim.base_url(v) for v in "ab"}, load={"users": 4, "duration": "6s"})
    cmd = [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--report-dir", str(tmp / "r"), *args]
    env = {**os.environ, "LOADGEN_PROGRESS": "1"}
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=90, env=env)


@pytest.mark.parametrize("workers", ["0", "1"])
def test_plain_lines_in_a_log(tmp_path: Path, sim: Any, workers: str) -> None:
    proc = _run(tmp_path, sim, "--workers", workers)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("loadgen: ") and " req/s | " in ln]
    assert len(lines) >= 2, proc.stderr
    assert "\r" not in proc.stderr and "\x1b" not in proc.stderr
    last = lines[-1]
    assert "/6s | users 4 | " in last and "a TTFT p50 " in last and "b TTFT p50 " in last and "trust ok" in last
    assert "p50 —" not in last  # numbers by then, from the merged run
    assert " req/s | " not in (tmp_path / "r" / "locust-master.log").read_text()  # not in Locust's log


def test_one_redrawn_line_on_a_terminal(tmp_path: Path, sim: Any) -> None:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a 100-column terminal
    try:
        proc = _run(tmp_path, sim, "--workers", "0", stderr=slave)
        os.close(slave)
        slave = -1
        chunks = []
        # The run is over (subprocess.run waited for it): drain what the terminal holds. Not until EOF: a slave
        # descriptor some other test leaked into this process would keep the read blocking for ever.
        while select.select([master], [], [], 0.5)[0]:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer closed
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)
    assert proc.returncode == 0
    out = b"".join(chunks).decode(errors="replace")
    draws = [d for d in out.split("\r") if d.startswith("[")]
    assert len(draws) >= 3, out  # a redraw a second on a terminal
    assert all("\n" not in d.split("\x1b[K")[0] for d in draws)
    assert "users 4" in draws[-1] and "a TTFT" in draws[-1]
    assert all(len(d.split("\x1b[K")[0]) <= 99 for d in draws)  # cut to the terminal's width
    assert out.count("\x1b[K\r\n") == 1  # the line ends once, after the last redraw (the pty adds the \r)


@pytest.mark.parametrize("flag", ["--quiet", "--no-progress"])
def test_quiet_and_no_progress_print_no_line(tmp_path: Path, sim: Any, flag: str) -> None:
    proc = _run(tmp_path, sim, "--workers", "0", flag)
    assert proc.returncode == 0
    assert " req/s | " not in proc.stderr, proc.stderr
