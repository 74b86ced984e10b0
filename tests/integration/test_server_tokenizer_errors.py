"""`tokenizer: server` against a target without `/tokenize` (the simulator has none) or one that cannot be reached:
exit 2 before any load, the message naming `tokenizer` and the URL asked, and no report written."""

from __future__ import annotations

import socket
from pathlib import Path

from loadgen.sim.launch import start_sim_process

from .harness import run_loadgen, write_scenario


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_target_without_tokenize_is_a_config_error(tmp_path: Path) -> None:
    with start_sim_process(["a=baseline"], truth_log=tmp_path / "truth.jsonl") as sim:
        url = sim.base_url("a")
        scenario = write_scenario(tmp_path / "s.yaml", {"a": url}, tokenizer="server", load={"duration": "2s"})
        proc = run_loadgen(scenario, "--workers", "0")
        sim.stop()
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"tokenizer: server: POST {url}/tokenize answered 404" in proc.stderr
    assert not (tmp_path / "report").exists()
    # Before any load: the simulator saw no completion request.
    assert '"token"' not in (tmp_path / "truth.jsonl").read_text()


def test_an_unreachable_target_is_a_config_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    scenario = write_scenario(tmp_path / "s.yaml", {"a": url}, tokenizer="server", load={"duration": "2s"})
    proc = run_loadgen(scenario, "--workers", "0")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"tokenizer: server: cannot reach {url}/tokenize" in proc.stderr
    assert not (tmp_path / "report").exists()
