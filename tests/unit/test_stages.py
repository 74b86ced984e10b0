"""Load in stages: the rate profile's time rescaling (counts per stage, ramps, the inverse), the scenario's stage
fields, and the closed-loop shape's user counts over time."""

from __future__ import annotations

import math

import pytest

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import validate_scenario
from loadgen.traffic.arrivals import ArrivalSchedule, schedule_for, times_until
from loadgen.traffic.rate_profile import RateProfile
from tests.fresh_interpreter import run_fresh

SEED = 11

PROFILE = [(100.0, 20.0, False), (100.0, 60.0, True), (50.0, 0.0, False), (50.0, 30.0, False)]


def _count(times: list[float], a: float, b: float) -> int:
    return sum(1 for t in times if a <= t < b)


def test_the_inverse_of_the_cumulative_rate_is_exact() -> None:
    p = RateProfile(PROFILE)
    assert p.duration == 300.0
    assert p.cumulative(300.0) == pytest.approx(100 * 20 + 100 * 40 + 0 + 50 * 30)
    for seg in p.segments:
        for frac in (0.0, 0.1, 0.5, 0.9, 1.0):
            x = seg.area * frac
            t = seg.start + seg.offset_of(x)
            assert p.cumulative(t) - p.cumulative(seg.start) == pytest.approx(x, abs=1e-9)
    # A falling ramp too.
    down = RateProfile([(10.0, 50.0, False), (10.0, 10.0, True)])
    seg = down.segments[1]
    assert down.cumulative(seg.start + seg.offset_of(100.0)) - down.cumulative(10.0) == pytest.approx(100.0)


def test_poisson_stages_send_each_stage_its_rate_within_3_sigma() -> None:
    # Counts over a stage are Poisson(Λ) under time rescaling: 3σ = 3·sqrt(Λ) (false alarm 0.27 % per stage).
    p = RateProfile(PROFILE)
    schedule = ArrivalSchedule("poisson", p.mean_rate(0, 300), profile=p)
    times = times_until(schedule, 1000.0, SEED)
    assert max(times) < 300.0  # the schedule ends with the last stage
    for a, b in ((0, 100), (100, 200), (200, 250), (250, 300), (100, 150), (150, 200)):
        expected = p.cumulative(b) - p.cumulative(a)
        assert abs(_count(times, a, b) - expected) <= 3 * math.sqrt(expected), (a, b)
    assert _count(times, 200, 250) == 0  # rate 0: nothing


def test_constant_stages_are_exact_and_shares_still_add_up() -> None:
    p = RateProfile([(10.0, 5.0, False), (10.0, 20.0, False)])
    schedule = ArrivalSchedule("constant", p.mean_rate(0, 20), profile=p)
    times = times_until(schedule, 100.0)
    # Arrival k at the time its k-th unit of cumulative rate is reached: 50 in (0, 10], 200 in (10, 20].
    assert sum(t <= 10 for t in times) == 50 and sum(10 < t <= 20 + 1e-9 for t in times) == 200
    assert all(b - a == pytest.approx(1 / 20) for a, b in zip(times[51:], times[52:], strict=False))
    shares = [times_until(schedule, 100.0, worker=w, workers=2) for w in range(2)]
    assert sorted(shares[0] + shares[1]) == times


def test_a_profile_that_sends_nothing_is_refused() -> None:
    with pytest.raises(ValueError, match="every stage has rate 0"):
        RateProfile([(5.0, 0.0, False)])
    with pytest.raises(ValueError, match="duration"):
        RateProfile([(0.0, 1.0, False)])


def _scenario(load: dict[str, object]) -> dict[str, object]:
    return {"name": "s", "variants": [{"name": "a", "base_url": "http://127.0.0.1:1", "model": "m"}], "load": load}


def test_stage_fields_set_the_duration_and_the_schedule() -> None:
    sc = validate_scenario(_scenario({"stages": [{"duration": "10s", "users": 2}, {"duration": 20, "users": 8}]}))
    assert sc.load.duration == 30.0
    open_sc = validate_scenario(
        _scenario(
            {
                "warmup": "5s",
                "arrival": {
                    "kind": "gamma",
                    "burstiness": 2,
                    "stages": [{"duration": 10, "rate": 4}, {"duration": 10, "rate": 8, "ramp": True}],
                },
            }
        )
    )
    assert open_sc.load.duration == 20.0
    arrival = open_sc.load.arrival
    assert arrival is not None and arrival.mean_rate() == pytest.approx((40 + 60) / 20)
    schedule = schedule_for(arrival)
    assert schedule.profile is not None and schedule.burstiness == 2 and schedule.kind == "gamma"


@pytest.mark.parametrize(
    ("load", "path", "needle"),
    [
        ({"duration": "5s", "stages": [{"duration": 10, "users": 2}]}, "load.duration", "add up to 10s"),
        ({"arrival": {"kind": "poisson"}}, "load.arrival.rate", "required"),
        (
            {"arrival": {"kind": "poisson", "rate": 3, "stages": [{"duration": 1, "rate": 1}]}},
            "load.arrival.rate",
            "not both",
        ),
        ({"arrival": {"kind": "poisson", "stages": [{"duration": 1, "rate": 0}]}}, "load.arrival.stages", "rate 0"),
        (
            {"arrival": {"kind": "poisson", "rate": 2}, "stages": [{"duration": 1, "users": 1}]},
            "load.stages",
            "arrival.stages",
        ),
        ({"stages": [{"duration": 10, "users": 2}], "warmup": 10}, "load.warmup", "shorter than the duration"),
        ({"stages": [{"duration": 1, "users": -1}]}, "load.stages.0.users", ""),
    ],
)
def test_stage_errors_name_the_field(load: dict[str, object], path: str, needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_scenario(_scenario(load))
    issue = next(i for i in err.value.issues if i.path.replace("[", ".").replace("]", "") == path)
    assert needle in issue.message


_SHAPE = """
import json
from loadgen.config.scenario import validate_scenario
from loadgen.locust_plugin.shape import StagesShape

load = {"spawn_rate": 3, "stages": [{"duration": 10, "users": 2}, {"duration": 5, "users": 6, "spawn_rate": 1}]}
variants = [{"name": "a", "base_url": "http://127.0.0.1:1", "model": "m"}]
shape = StagesShape(validate_scenario({"name": "s", "variants": variants, "load": load}))
print(json.dumps([shape.at(t) for t in (0, 9.99, 10, 14.9, 15)]))
"""


def test_the_shape_walks_the_stages_then_ends() -> None:
    # The shape imports Locust: its check runs in a fresh interpreter (tests/fresh_interpreter.py).
    assert run_fresh(_SHAPE) == [[2, 3.0], [2, 3.0], [6, 1.0], [6, 1.0], None]
