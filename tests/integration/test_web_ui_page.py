"""docs/web-ui.md's commands, run as the page writes them: the simulator block from the repository's root (the demo
scenario's ports), the single-process and the master + worker lines with a scenario of the reader's own. The one
change made: the web UI's and the master's ports are free ones (`--web-port`, `--master-bind-port`), and `MASTER`
is this machine. What is checked: the UI answers, with its Start form prefilled from the scenario (users, ramp up,
run time), and the worker reaches the master. (A run started from the form: tests/e2e/test_web_ui_run_time_chromium.py.)
"""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from loadgen.config.scenario import load_scenario
from loadgen.locust_plugin.launcher import free_port
from loadgen.sim.launch import start_sim_process

from .harness import write_scenario

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "web-ui.md"


def _blocks() -> list[list[str]]:
    """Each bash block's commands: comments dropped, a trailing `&` kept off (the caller starts every command as a
    process of its own)."""
    out = []
    for code in re.findall(r"```bash\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.DOTALL):
        cmds = []
        for line in code.splitlines():
            words = shlex.split(line, comments=True, posix=False)
            if words:
                cmds.append(" ".join(w for w in words if w != "&"))
        out.append(cmds)
    return out


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read()


def _wait(what: str, check: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if got := check():
                return got
        except OSError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


@contextmanager
def _shell(command: str, cwd: Path, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A command of the page in bash (its `$(loadgen locustfile)` expanded there), in `cwd`, until the block ends."""
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", "-c", f"exec {command}"], cwd=cwd, stdout=out, stderr=out, env=os.environ)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _form(url: str) -> dict[str, Any]:
    """The Start form's prefilled values, from the template arguments Locust's page is rendered with."""
    page = _get(url + "/").decode()
    args = json.loads(re.search(r"window\.templateArgs\s*=\s*(\{.*?\})\s*</script>", page, re.S).group(1))  # type: ignore[union-attr]
    return {k: args[k] for k in ("num_users", "spawn_rate", "run_time")}


def _ports_free(*ports: int) -> None:
    for port in ports:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port}, which the page's simulator uses, is taken"


def test_the_simulator_block(tmp_path: Path) -> None:
    (block,) = [b for b in _blocks() if any(c.startswith("loadgen sim ") for c in b)]
    sim, sleep, ui = block
    assert sleep.startswith("sleep ") and ui.startswith('locust -f "$(loadgen locustfile)"')
    _ports_free(8001, 8002, 8003)
    web = free_port()
    with ExitStack() as stack:
        stack.enter_context(_shell(sim, ROOT, tmp_path / "sim.log"))
        _wait("the simulator", lambda: _get("http://127.0.0.1:8003/v1/models"))
        stack.enter_context(_shell(f"{ui} --web-port {web}", ROOT, tmp_path / "ui.log"))
        url = f"http://127.0.0.1:{web}"
        _wait("the web UI", lambda: json.loads(_get(url + "/stats/requests"))["state"] == "ready")
        load = load_scenario(ROOT / "loadgen" / "examples" / "demo.yaml").load
        want = {"num_users": load.users, "spawn_rate": load.spawn_rate, "run_time": math.ceil(load.duration)}
        assert _form(url) == want


def test_the_single_process_and_master_worker_lines(tmp_path: Path) -> None:
    lines = [c for b in _blocks() for c in b if c.startswith("locust ") and "--scenario scenario.yaml" in c]
    single, master, worker = lines
    assert "--master" in master and "--worker --master-host MASTER" in worker
    with start_sim_process(["a=int8"]) as sim:
        write_scenario(tmp_path / "scenario.yaml", {"a": sim.base_url("a")}, load={"users": 3, "duration": "90s"})
        web = free_port()
        with _shell(f"{single} --web-host 127.0.0.1 --web-port {web}", tmp_path, tmp_path / "single.log"):
            url = f"http://127.0.0.1:{web}"
            _wait("the web UI", lambda: json.loads(_get(url + "/stats/requests"))["state"] == "ready")
            assert _form(url) == {"num_users": 3, "spawn_rate": 100.0, "run_time": 90}
        web, zmq = free_port(), free_port()
        with ExitStack() as stack:
            ports = f"--web-host 127.0.0.1 --web-port {web} --master-bind-host 127.0.0.1 --master-bind-port {zmq}"
            stack.enter_context(_shell(f"{master} {ports}", tmp_path, tmp_path / "master.log"))
            url = f"http://127.0.0.1:{web}"
            _wait("the master", lambda: _get(url + "/stats/requests"))
            worker = worker.replace("MASTER", "127.0.0.1") + f" --master-port {zmq}"
            stack.enter_context(_shell(worker, tmp_path, tmp_path / "worker.log"))
            _wait("the worker", lambda: len(json.loads(_get(url + "/stats/requests"))["workers"]) == 1)
