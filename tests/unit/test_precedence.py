"""One rule for a setting given in several places: scenario file < environment < command line < web UI form
(config/precedence.py), as a table (k6's config_consolidation_test), and as the commands read a scenario."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from loadgen.cli.scenario_args import read_with_overrides
from loadgen.config.errors import ConfigError
from loadgen.config.precedence import (
    ENV_VARS,
    LAYERS,
    SETTINGS,
    Given,
    environment_overrides,
    given_duration,
    resolved_duration,
    winner,
)

FILE, ENV, CLI, FORM = range(4)


@pytest.mark.parametrize(
    ("given", "wins"),
    [
        ([Given(FILE, "load.users", 16)], 16),
        ([Given(FILE, "load.users", 16), Given(ENV, "LOCUST_USERS", 8)], 8),
        ([Given(FILE, "load.users", 16), Given(ENV, "LOCUST_USERS", 8), Given(CLI, "-u", 4)], 4),
        ([Given(CLI, "-u", 4), Given(FILE, "load.users", 16), Given(ENV, "LOCUST_USERS", 8)], 4),  # order given: none
        ([Given(FILE, "load.users", 16), Given(CLI, "-u", 4), Given(FORM, "Number of users", 2)], 2),
        ([Given(FILE, "load.users", 16), Given(ENV, "LOCUST_USERS", None)], 16),  # an unset source gives nothing
        ([], None),
    ],
)
def test_the_highest_layer_wins(given: list[Given], wins: int | None) -> None:
    got = winner(given)
    assert (got.value if got else None) == wins


def test_two_sources_of_one_layer_agree_or_are_refused() -> None:
    same = [Given(ENV, "LOADGEN_DURATION", "1m"), Given(ENV, "LOCUST_RUN_TIME", "60")]
    assert resolved_duration(same) == same[0]  # 1m and 60 s are one duration
    with pytest.raises(ConfigError, match=r"LOADGEN_DURATION \(30s\) and LOCUST_RUN_TIME \(60\) disagree"):
        resolved_duration([Given(ENV, "LOADGEN_DURATION", "30s"), Given(ENV, "LOCUST_RUN_TIME", "60")])
    # A disagreement below the winning layer does not matter: the command line decides.
    got = resolved_duration(
        [Given(ENV, "LOADGEN_DURATION", "30s"), Given(ENV, "LOCUST_RUN_TIME", "60"), Given(CLI, "-t", "5s")]
    )
    assert got is not None and got.value == "5s"


def test_the_layers_and_settings_are_written_down_once() -> None:
    assert LAYERS == ("scenario file", "environment", "command line", "web UI form")
    assert [s.name for s in SETTINGS] == ["load.users", "load.spawn_rate", "load.duration", "report_dir"]
    assert set(ENV_VARS) == {
        "LOCUST_USERS",
        "LOCUST_SPAWN_RATE",
        "LOCUST_RUN_TIME",
        "LOADGEN_DURATION",
        "LOADGEN_REPORT_DIR",
    }


def test_the_environment_s_layer_as_overrides() -> None:
    env = {"LOCUST_USERS": "8", "LOCUST_RUN_TIME": "1m", "LOADGEN_DURATION": "60s", "LOCUST_SPAWN_RATE": " "}
    got = {o.keys: (o.value, o.flag) for o in environment_overrides(env)}
    # Typed as the same value written in the file would be; an empty variable is not set.
    assert got == {("load", "users"): (8, "LOCUST_USERS"), ("load", "duration"): ("60s", "LOADGEN_DURATION")}
    assert environment_overrides({}) == []
    with pytest.raises(ConfigError, match="LOCUST_RUN_TIME"):
        environment_overrides({"LOADGEN_DURATION": "30s", "LOCUST_RUN_TIME": "60"})


@pytest.mark.parametrize(
    ("flag", "run_time", "env", "wins"),
    [
        ("", None, {}, None),  # the file's
        ("", None, {"LOCUST_RUN_TIME": "20"}, ("LOCUST_RUN_TIME", "20")),
        ("", 20, {"LOCUST_RUN_TIME": "20s"}, ("LOCUST_RUN_TIME", "20s")),  # -t's value is its variable's: the env's
        ("", 5, {"LOCUST_RUN_TIME": "20"}, ("-t/--run-time", "5s")),  # -t on the command line over its variable
        ("5s", None, {"LOCUST_RUN_TIME": "20"}, ("--loadgen-duration", "5s")),  # another flag, but the command line
        ("30s", None, {"LOADGEN_DURATION": "30s"}, ("LOADGEN_DURATION", "30s")),
        ("5s", 5, {}, ("--loadgen-duration", "5s")),  # both flags, one duration
    ],
)
def test_a_locust_process_s_duration(
    flag: str, run_time: int | None, env: dict[str, str], wins: tuple[str, str] | None
) -> None:
    got = resolved_duration(given_duration(flag, run_time, env))
    assert (None if got is None else (got.source, got.value)) == wins


def test_a_locust_process_refuses_two_durations_on_its_command_line() -> None:
    with pytest.raises(ConfigError, match=r"--loadgen-duration \(5s\) and -t/--run-time \(9s\) disagree"):
        resolved_duration(given_duration("5s", 9, {}))


def _args(*sets: str) -> argparse.Namespace:
    return argparse.Namespace(set=list(sets))


@pytest.mark.parametrize(
    ("env", "sets", "users", "duration"),
    [
        ({}, (), 16, 60.0),
        ({"LOCUST_USERS": "8", "LOADGEN_DURATION": "30s"}, (), 8, 30.0),
        ({"LOCUST_USERS": "8", "LOADGEN_DURATION": "30s"}, ("load.users=4",), 4, 30.0),
        ({"LOCUST_USERS": "8", "LOCUST_RUN_TIME": "2m"}, ("load.duration=10s", "load.users=2"), 2, 10.0),
    ],
)
def test_commands_read_file_then_environment_then_command_line(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    sets: tuple[str, ...],
    users: int,
    duration: float,
) -> None:
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    for var, value in env.items():
        monkeypatch.setenv(var, value)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "variants: [{name: a, base_url: 'http://127.0.0.1:9', model: m}]\nload: {users: 16, duration: 60s}\n",
        encoding="utf-8",
    )
    sc = read_with_overrides(scenario, _args(*sets)).validate()
    assert (sc.load.users, sc.load.duration) == (users, duration)


def test_a_bad_value_from_the_environment_names_its_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ENV_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("LOCUST_USERS", "lots")
    scenario = tmp_path / "s.yaml"
    scenario.write_text("variants: [{name: a, base_url: 'http://127.0.0.1:9', model: m}]\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"load\.users.*\(LOCUST_USERS\)"):
        read_with_overrides(scenario, _args()).validate()
