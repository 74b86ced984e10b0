"""`loadgen k8s run` refuses before it creates anything, and refuses nothing the pods can run.

What the master would refuse at its start and this machine can tell — the scenario with the environment's and the
command line's settings over it (config/precedence.py), each phase of a sequential scenario, users that leave a
variant without one — is refused with exit 2 and no call that creates an object. A sequential scenario, which the
master runs one variant after another (locust_plugin/phases.py), is created and run, however few its users.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.cli import main
from tests.k8s.fake_api import fake_api
from tests.k8s.test_run import Run

VARIANTS = [{"name": n, "base_url": f"http://{n}:8000", "model": "m"} for n in ("a", "b")]
# Weights 10 : 1: Locust's dispatcher gives the first two users both to a.
UNEVEN = [VARIANTS[0] | {"weight": 10}, VARIANTS[1]]


def _k8s_run(tmp: Path, doc: dict[str, Any], *flags: str) -> tuple[int, list[Any]]:
    """`loadgen k8s run` of `doc` against the fake API server (its pods play a run that exits 0): its exit code and
    the calls that created objects."""
    scenario = tmp / "s.yaml"
    scenario.write_text(yaml.safe_dump(doc), encoding="utf-8")
    with fake_api(tmp) as (c, kubeconfig):
        Run(c, exit_code=0)
        argv = ["k8s", "run", str(scenario), "--kubeconfig", str(kubeconfig), "--name", "lg", "--interval", "0.01"]
        code = main([*argv, "--report-dir", str(tmp / "out"), *flags])
        created = [call for call in c.calls if call.method == "POST"]
    return code, created


@pytest.mark.parametrize(
    ("doc", "flags", "env", "said"),
    [
        pytest.param(
            {"variants": UNEVEN, "load": {"users": 2}},
            [],
            {},
            "load.users (2) leaves variant(s) b without a user",
            id="users-leave-a-variant",
        ),
        pytest.param(
            {"variants": UNEVEN, "load": {"stages": [{"duration": "2s", "users": 20}, {"duration": "2s", "users": 2}]}},
            [],
            {},
            "load.stages[1].users (2) leaves variant(s) b without a user",
            id="a-stage-leaves-a-variant",
        ),
        pytest.param(
            {"variants": VARIANTS, "load": {"users": 4}},
            [],
            {"LOCUST_USERS": "1"},
            "1 users cannot cover 2 variants: every variant needs at least one user (load.users >= 2) (LOCUST_USERS)",
            id="the-environment-s-users",
        ),
        pytest.param(
            {"variants": VARIANTS, "load": {"warmup": "5s"}},
            ["--duration", "2s"],
            {},
            "warm-up (5s) must be shorter than the duration (2s)",
            id="duration-under-warmup",
        ),
        pytest.param(
            {"variants": VARIANTS},
            [],
            {"LOADGEN_DURATION": "30s", "LOCUST_RUN_TIME": "60"},
            "LOADGEN_DURATION (30s) and LOCUST_RUN_TIME (60) disagree",
            id="two-variables-disagree",
        ),
        pytest.param({"variants": VARIANTS, "load": {"users": 0}}, [], {}, "load.users", id="invalid-field"),
    ],
)
def test_refused_before_any_object(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    doc: dict[str, Any],
    flags: list[str],
    env: dict[str, str],
    said: str,
) -> None:
    for var in ("LOCUST_USERS", "LOCUST_SPAWN_RATE", "LOCUST_RUN_TIME", "LOADGEN_DURATION", "LOADGEN_REPORT_DIR"):
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    code, created = _k8s_run(tmp_path, doc, *flags)
    err = capsys.readouterr().err
    assert code == 2 and said in err, err
    assert created == []


def test_a_sequential_scenario_is_run_however_few_its_users(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # One user for two variants: together they could not run (above), one after another each gets the one user.
    doc = {"variants": VARIANTS, "load": {"users": 1, "duration": "2s", "sequential": True, "sequential_pause": "1s"}}
    code, created = _k8s_run(tmp_path, doc)
    assert code == 0, capsys.readouterr().err
    (cm,) = [call.body for call in created if call.path.endswith("/configmaps")]
    run_doc = yaml.safe_load(cm["data"]["scenario.yaml"])
    assert run_doc["load"]["sequential"] is True and [v["name"] for v in run_doc["variants"]] == ["a", "b"]
    assert [call.body["metadata"]["name"] for call in created if call.path.endswith("/jobs")] == [
        "lg-worker",
        "lg-master",
    ]


def test_the_command_line_s_duration_goes_to_the_pods_over_the_environment_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOADGEN_DURATION", "30s")
    monkeypatch.setenv("LOCUST_USERS", "3")
    code, created = _k8s_run(tmp_path, {"variants": VARIANTS[:1]}, "--duration", "5s")
    assert code == 0
    (cm,) = [call.body for call in created if call.path.endswith("/configmaps")]
    load = yaml.safe_load(cm["data"]["scenario.yaml"])["load"]
    assert load["duration"] == "5s" and load["users"] == 3  # command line over environment over file
