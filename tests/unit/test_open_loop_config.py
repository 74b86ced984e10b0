"""Open-loop load in the scenario: `load.arrival`, `load.overflow`, and the queue_delay SLO they make possible."""

from __future__ import annotations

import textwrap

import pytest

from loadgen.config.scenario import ConfigError, ConfigIssue, parse_scenario
from loadgen.config.traffic import ARRIVAL_KIND_NAMES
from loadgen.traffic.arrivals import arrival_kinds

BASE = """\
variants:
  - {name: a, base_url: "http://127.0.0.1:8000", model: m}
"""


def _scenario(load: str, slos: str = ""):
    return parse_scenario(BASE + textwrap.dedent(load) + textwrap.dedent(slos), "s.yaml")


def _issues(load: str, slos: str = "") -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as info:
        _scenario(load, slos)
    return info.value.issues


def test_closed_loop_is_the_default() -> None:
    load = _scenario("").load
    assert load.arrival is None and load.overflow is None and load.overflow_policy == "late"


@pytest.mark.parametrize(
    ("text", "kind", "rate", "burstiness", "overflow"),
    [
        ("load: {arrival: {kind: poisson, rate: 20}}\n", "poisson", 20.0, None, "late"),
        ("load: {arrival: {kind: constant, rate: 0.5}, overflow: drop}\n", "constant", 0.5, None, "drop"),
        ("load: {arrival: {kind: gamma, rate: 100, burstiness: 0.25}, overflow: late}\n", "gamma", 100.0, 0.25, "late"),
    ],
)
def test_arrival_parses(text: str, kind: str, rate: float, burstiness: float | None, overflow: str) -> None:
    load = _scenario(text).load
    assert load.arrival is not None
    assert (load.arrival.kind, load.arrival.rate, load.arrival.burstiness) == (kind, rate, burstiness)
    assert load.overflow_policy == overflow


@pytest.mark.parametrize(
    ("text", "path", "fragment"),
    [
        ("load: {arrival: {kind: bursty, rate: 1}}\n", "load.arrival.kind", "poisson"),
        ("load: {arrival: {rate: 1}}\n", "load.arrival.kind", "required"),
        ("load: {arrival: {kind: poisson}}\n", "load.arrival.rate", "required"),
        ("load: {arrival: {kind: poisson, rate: 0}}\n", "load.arrival.rate", "greater than 0"),
        ("load: {arrival: {kind: poisson, rate: .inf}}\n", "load.arrival.rate", "finite"),
        ("load: {arrival: {kind: poisson, rate: '5'}}\n", "load.arrival.rate", ""),
        ("load: {arrival: {kind: gamma, rate: 5}}\n", "load.arrival.burstiness", "gamma needs burstiness"),
        ("load: {arrival: {kind: gamma, rate: 5, burstiness: 0}}\n", "load.arrival.burstiness", "greater than 0"),
        ("load: {arrival: {kind: poisson, rate: 5, burstiness: 2}}\n", "load.arrival.burstiness", "gamma only"),
        ("load: {arrival: {kind: poisson, rate: 5, max_in_flight: 2}}\n", "load.arrival.max_in_flight", ""),
        ("load: {overflow: drop}\n", "load.overflow", "open loop only"),
        ("load: {arrival: {kind: poisson, rate: 5}, overflow: queue}\n", "load.overflow", "late"),
        ("load: {arrival: {kind: poisson, rate: 5}, think_time: 1s}\n", "load.think_time", "closed loop only"),
    ],
)
def test_arrival_errors_name_the_field(text: str, path: str, fragment: str) -> None:
    issues = _issues(text)
    assert [i.path for i in issues] == [path], issues
    assert fragment in issues[0].message


QUEUE_SLO = "slos: [{metric: queue_delay, stat: p99, max_ms: 5}]\n"


def test_queue_delay_slo_needs_open_loop() -> None:
    issues = _issues("", QUEUE_SLO)
    assert [i.path for i in issues] == ["slos[0].metric"]
    assert "load.arrival" in issues[0].message and "closed-loop" in issues[0].message
    scenario = _scenario("load: {arrival: {kind: poisson, rate: 5}}\n", QUEUE_SLO)
    assert scenario.slos[0].metric == "queue_delay"


def test_the_model_names_the_kinds_the_schedules_have() -> None:
    assert sorted(ARRIVAL_KIND_NAMES) == sorted(arrival_kinds().names())
