"""Where a run's settings come from, and which one wins: scenario file < environment < command line < web UI form.

Four settings can be given in more than one place (`SETTINGS`): the users, their spawn rate, the run's duration and
the report folder. Each layer overrides the one before it:

1. the scenario file's field (`load.users`, `load.spawn_rate`, `load.duration`, `report_dir`);
2. the environment: Locust's and loadgen's variables (`LOCUST_USERS`, `LOCUST_SPAWN_RATE`, `LOCUST_RUN_TIME`,
   `LOADGEN_DURATION`, `LOADGEN_REPORT_DIR`), read as overrides of that field (`environment_overrides`);
3. the command line: loadgen's `--set`, `--duration`, `--report-dir`; `locust`'s `-u`, `-r`, `-t`,
   `--loadgen-duration`, `--report-dir`;
4. the web UI's Start form: users, ramp up and run time, prefilled with what the three layers before it resolved to.

loadgen's commands (`run`, `validate`, `sweep`, `demo`, `k8s run`) resolve the first three once, into the scenario
they validate and run, and start their Locust processes without the variables (`ENV_VARS`), so that nothing is
applied twice or in another order. A Locust process started by hand resolves its duration itself (`winner` over
`given_duration`): Locust orders each of its flags over that flag's variable, but the duration has two of each.
Two sources of one layer that disagree (`LOADGEN_DURATION=30s` and `LOCUST_RUN_TIME=60`) are refused, naming both.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from loadgen.config.durations import parse_duration
from loadgen.config.errors import ConfigError, ConfigIssue
from loadgen.config.overrides import Override

__all__ = [
    "ENV_VARS",
    "LAYERS",
    "SETTINGS",
    "Given",
    "Setting",
    "environment_overrides",
    "given_duration",
    "resolved_duration",
    "winner",
]

LAYERS = ("scenario file", "environment", "command line", "web UI form")
FILE, ENVIRONMENT, COMMAND_LINE, FORM = range(4)


@dataclass(frozen=True, slots=True)
class Setting:
    """One setting that several layers can give: its scenario field, its environment variables, its flags (as the
    docs name them) and the Start form's field."""

    field: tuple[str, ...]
    env: tuple[str, ...]
    flags: tuple[str, ...]
    form: str = ""

    @property
    def name(self) -> str:
        return ".".join(self.field)


SETTINGS = (
    Setting(("load", "users"), ("LOCUST_USERS",), ("--set load.users", "locust -u"), "Number of users"),
    Setting(("load", "spawn_rate"), ("LOCUST_SPAWN_RATE",), ("--set load.spawn_rate", "locust -r"), "Ramp up"),
    Setting(
        ("load", "duration"),
        ("LOADGEN_DURATION", "LOCUST_RUN_TIME"),
        ("--duration", "--set load.duration", "locust -t", "locust --loadgen-duration"),
        "Run time",
    ),
    Setting(("report_dir",), ("LOADGEN_REPORT_DIR",), ("--report-dir",)),
)
ENV_VARS = tuple(var for s in SETTINGS for var in s.env)


@dataclass(frozen=True, slots=True)
class Given:
    """A value as one source gave it: its layer (an index of `LAYERS`), the source's name, the value."""

    layer: int
    source: str
    value: Any


def _same_duration(a: Any, b: Any) -> bool:
    try:
        return parse_duration(a) == parse_duration(b)
    except ValueError:
        return bool(a == b)


def winner(given: Iterable[Given], same: Callable[[Any, Any], bool] = lambda a, b: bool(a == b)) -> Given | None:
    """The value of the highest layer that gives one (None when none does). Two sources of that layer that give
    different values (by `same`) raise ``ConfigError``: which one was meant is not ours to guess."""
    top: list[Given] = []
    for g in given:
        if g.value is None:
            continue
        if not top or g.layer > top[0].layer:
            top = [g]
        elif g.layer == top[0].layer:
            top.append(g)
    for other in top[1:]:
        if not same(top[0].value, other.value):
            a, b = top[0], other
            raise ConfigError(
                [
                    ConfigIssue(
                        "",
                        f"{a.source} ({a.value}) and {b.source} ({b.value}) disagree, and both are the "
                        f"{LAYERS[a.layer]}: give one of them",
                    )
                ],
                LAYERS[a.layer],
            )
    return top[0] if top else None


def _env_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # validation names the variable


def environment_overrides(environ: Mapping[str, str] | None = None) -> list[Override]:
    """The environment's layer as overrides of the scenario (applied before the command line's): one per setting
    whose variable is set and not empty, naming the variable. Raises ``ConfigError`` when two variables of one
    setting disagree."""
    env = os.environ if environ is None else environ
    out = []
    for s in SETTINGS:
        given = [Given(ENVIRONMENT, var, env[var].strip()) for var in s.env if env.get(var, "").strip()]
        top = winner(given, _same_duration if s.field == ("load", "duration") else lambda a, b: a == b)
        if top is not None:
            text = f"{s.name}={top.value}"
            out.append(Override(text, s.field, _env_value(top.value), via=top.source))
    return out


def given_duration(
    loadgen_duration: str | None,
    run_time_s: int | None,
    environ: Mapping[str, str] | None = None,
) -> list[Given]:
    """A Locust process's sources of `load.duration` besides the file, each in its layer: `--loadgen-duration` and
    `-t` as Locust parsed them (a flag's variable gives it when the flag is not on the command line, so a value
    equal to its variable's is the environment's) and the variables."""
    env = os.environ if environ is None else environ
    out = []
    env_duration = env.get("LOADGEN_DURATION", "").strip()
    env_run_time = env.get("LOCUST_RUN_TIME", "").strip()
    if env_duration:
        out.append(Given(ENVIRONMENT, "LOADGEN_DURATION", env_duration))
    if env_run_time:
        out.append(Given(ENVIRONMENT, "LOCUST_RUN_TIME", env_run_time))
    if loadgen_duration and not (env_duration and loadgen_duration.strip() == env_duration):
        out.append(Given(COMMAND_LINE, "--loadgen-duration", loadgen_duration.strip()))
    if run_time_s and not (env_run_time and _same_duration(env_run_time, run_time_s)):
        out.append(Given(COMMAND_LINE, "-t/--run-time", f"{run_time_s}s"))
    return out


def resolved_duration(given: Iterable[Given]) -> Given | None:
    """The duration that wins among ``given`` (see `winner`); durations are compared in seconds."""
    return winner(given, _same_duration)
