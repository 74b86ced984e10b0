"""`loadgen k8s run` as a process, against the fake API server, into each code it can give (loadgen/exit_codes.py's
BY_COMMAND): the run's verdict as the master's report server says it (0, 1, 3), usage (2), the command or the run
failing (4: a master that served no reports, an API server that refuses a call or cannot be reached), and a master
killed by a signal (128 + N). tests/integration/test_exit_codes.py does the same for the other gates."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from loadgen.exit_codes import BY_COMMAND
from tests.k8s.fake_api import FakeCluster, fake_api
from tests.k8s.test_run import DOC, Run

ROOT = Path(__file__).resolve().parents[2]


def _k8s_run(tmp: Path, kubeconfig: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    scenario = tmp / "s.yaml"
    scenario.write_text(yaml.safe_dump(DOC), encoding="utf-8")
    argv = ["k8s", "run", str(scenario), "--kubeconfig", str(kubeconfig), "--name", "lg", "--interval", "0.01"]
    argv += ["--report-dir", str(tmp / "reports"), *extra]
    return subprocess.run(
        [sys.executable, "-m", "loadgen.cli", *argv],
        capture_output=True,
        text=True,
        timeout=90,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)},
    )


_SECRET = ("--secret", "OPENAI_API_KEY=keys:openai")


def _verdict(code: int) -> Callable[[FakeCluster], object]:
    return lambda c: Run(c, exit_code=code)


def _no_reports(master_exit: int) -> Callable[[FakeCluster], object]:
    return lambda c: Run(c, exit_code=master_exit, serve_after=None)


def _name_taken(c: FakeCluster) -> None:
    Run(c, exit_code=0)
    c.put("jobs", {"metadata": {"name": "lg-master", "namespace": "llm"}, "spec": {"template": {"metadata": {}}}})


CASES: dict[str, tuple[int, Callable[[FakeCluster], object], tuple[str, ...]]] = {
    "the run met its SLOs": (0, _verdict(0), _SECRET),
    "the run breached": (1, _verdict(1), _SECRET),
    "a credential variable without --secret": (2, _verdict(0), ()),
    "the master refused its configuration": (2, _no_reports(2), _SECRET),
    "the run's load generator distrusted": (3, _verdict(3), _SECRET),
    "a master that ended without serving reports": (4, _no_reports(1), _SECRET),
    "a name already taken (409)": (4, _name_taken, _SECRET),
    "a master killed by SIGKILL": (137, _no_reports(137), _SECRET),
}


@pytest.mark.parametrize("case", list(CASES))
def test_k8s_run(case: str, tmp_path: Path) -> None:
    code, cluster, extra = CASES[case]
    with fake_api(tmp_path) as (c, kubeconfig):
        cluster(c)
        proc = _k8s_run(tmp_path, kubeconfig, *extra)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_api_server_that_cannot_be_reached_is_exit_4(tmp_path: Path) -> None:
    with fake_api(tmp_path) as (_, kubeconfig):
        pass  # stopped: its port now refuses connections
    proc = _k8s_run(tmp_path, kubeconfig, *_SECRET)
    assert proc.returncode == 4 and "cannot reach the Kubernetes API server" in proc.stderr, proc.stderr


def test_a_kubeconfig_that_cannot_be_loaded_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "kubeconfig").write_text("not: [a kubeconfig\n", encoding="utf-8")
    proc = _k8s_run(tmp_path, tmp_path / "kubeconfig", *_SECRET)
    assert proc.returncode == 2 and "no Kubernetes configuration" in proc.stderr, proc.stderr


def test_a_report_directory_under_a_regular_file_is_one_line_and_exit_4(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder\n", encoding="utf-8")
    with fake_api(tmp_path) as (c, kubeconfig):
        Run(c, exit_code=0)
        proc = _k8s_run(tmp_path, kubeconfig, *_SECRET, "--report-dir", str(tmp_path / "a-file" / "out"))
    assert proc.returncode == 4 and "Traceback" not in proc.stderr, proc.stderr
    (log,) = tmp_path.glob("loadgen-crash-*.log")
    assert proc.stderr.strip().splitlines()[-1].startswith("loadgen: k8s run failed: NotADirectoryError: ")
    assert f"(traceback in {log})" in proc.stderr and "cannot reach" not in proc.stderr
    assert c.objects == {}  # what the run made was deleted all the same


def test_every_code_of_k8s_run_is_run_into() -> None:
    assert {code for code, *_ in CASES.values() if code < 128} == set(BY_COMMAND["k8s run"])
