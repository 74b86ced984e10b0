"""Open-loop arrival schedules: statistics, worker splits and determinism, all from the pure generators.

The statistical tests use fixed seeds, so they are deterministic; each comment states the false-alarm rate the
tolerance would have over random seeds (normal approximations; the spread of the gap CV was also measured over
300 seeds: sd 0.0102 for Poisson, 0.0124 relative for gamma 0.5, 0.0077 for gamma 4, as the formulas below give).
"""

from __future__ import annotations

import heapq
import math
import statistics
from fractions import Fraction
from itertools import islice

import pytest

from loadgen.traffic.arrivals import (
    ArrivalSchedule,
    arrival_kinds,
    constant,
    gamma,
    poisson,
    requested_rate,
    schedule_arrivals,
    schedule_times,
    times_until,
)

SEED = 20240611


def _gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *times[:-1]], times, strict=True)]


def _cv(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.fmean(values)


# --- the shape of the gaps ----------------------------------------------------------------------------------


def test_poisson_gap_cv_is_one_within_5_percent_over_10000_arrivals() -> None:
    # Sample CV of n exponential gaps: sd = 1/sqrt(n) = 0.01 (delta method: c²/n·((κ-1)/4 - γ₁c + c²) with κ = 9,
    # γ₁ = 2, c = 1). 5 % is 5σ: false alarm ~6e-7.
    gaps = _gaps(list(islice(poisson(25.0, seed=SEED), 10_000)))
    cv = _cv(gaps)
    assert abs(cv - 1.0) < 0.05, cv
    # And the mean gap is 1/rate (relative sd 1 %: 5 % is 5σ).
    assert statistics.fmean(gaps) == pytest.approx(1 / 25.0, rel=0.05)


@pytest.mark.parametrize("burstiness", [0.5, 4.0])
def test_gamma_gap_cv_is_one_over_sqrt_burstiness_within_5_percent(burstiness: float) -> None:
    # Relative sd of the sample CV of n gamma(k) gaps: sqrt((1/2 + 1/(2k)) / n): 1.22 % at k = 0.5 (5 % is 4.1σ,
    # false alarm ~4e-5), 0.79 % at k = 4 (6.3σ, ~3e-10).
    gaps = _gaps(list(islice(gamma(25.0, burstiness, seed=SEED), 10_000)))
    expected = 1 / math.sqrt(burstiness)
    assert _cv(gaps) == pytest.approx(expected, rel=0.05)
    # The rate does not move with the burstiness: relative sd of the mean gap is CV/sqrt(n) (1.4 % at k = 0.5, so
    # 6 % is 4.2σ, false alarm ~3e-5).
    assert statistics.fmean(gaps) == pytest.approx(1 / 25.0, rel=0.06)


def test_gamma_with_burstiness_one_is_poisson_like() -> None:
    gaps = _gaps(list(islice(gamma(10.0, 1.0, seed=SEED), 10_000)))
    assert _cv(gaps) == pytest.approx(1.0, rel=0.05)  # as the Poisson test: 5σ


def test_constant_gaps_are_exact() -> None:
    times = list(islice(constant(8.0), 1000))
    assert times[0] == 1 / 8 and times[-1] == 1000 / 8
    assert all(t == (k + 1) / 8 for k, t in enumerate(times))


@pytest.mark.parametrize("kind", ["poisson", "gamma", "constant"])
def test_times_start_after_zero_and_never_go_back(kind: str) -> None:
    schedule = ArrivalSchedule(kind, 100.0, 0.25 if kind == "gamma" else 1.0)
    times = times_until(schedule, 30.0, seed=SEED)
    assert times[0] > 0 and times[-1] <= 30.0
    assert all(a <= b for a, b in zip(times, times[1:], strict=False))


# --- counts over a horizon ----------------------------------------------------------------------------------


def test_two_poisson_workers_send_rate_times_horizon_within_3_sigma() -> None:
    # The union of 2 independent Poisson processes of R/2 is Poisson of R: the count over T is Poisson(R·T),
    # σ = sqrt(R·T) = 100 here. 3σ two-sided: false alarm 0.27 %.
    rate, horizon = 50.0, 200.0
    schedule = ArrivalSchedule("poisson", rate)
    counts = [len(times_until(schedule, horizon, seed=SEED, worker=w, workers=2)) for w in range(2)]
    expected = rate * horizon
    assert abs(sum(counts) - expected) <= 3 * math.sqrt(expected), counts
    # Each worker on its own: Poisson(R·T/2), 3σ = 212 (false alarm 0.27 % each).
    for c in counts:
        assert abs(c - expected / 2) <= 3 * math.sqrt(expected / 2), counts


def test_two_gamma_workers_send_rate_times_horizon_within_3_sigma() -> None:
    # A renewal process with gap CV c counts N(T) with variance ~ c²·R·T: σ = sqrt(R·T/burstiness) (141 here).
    # 3σ two-sided: false alarm ~0.27 %.
    rate, horizon, burstiness = 50.0, 200.0, 0.5
    schedule = ArrivalSchedule("gamma", rate, burstiness)
    total = sum(len(times_until(schedule, horizon, seed=SEED, worker=w, workers=2)) for w in range(2))
    assert abs(total - rate * horizon) <= 3 * math.sqrt(rate * horizon / burstiness), total


@pytest.mark.parametrize("rate", ["0.1", "0.29", "1", "3", "7.5", "10", "33.3", "100", "999"])
@pytest.mark.parametrize("horizon", ["1", "2.5", "10", "30", "100"])
def test_constant_sends_exactly_floor_rate_times_horizon(rate: str, horizon: str) -> None:
    # floor of the exact decimal product (0.29 * 100 is 28.999999999999996 in binary floats; the schedule sends 29).
    expected = math.floor(Fraction(rate) * Fraction(horizon))
    schedule = ArrivalSchedule("constant", float(rate))
    assert len(times_until(schedule, float(horizon))) == expected
    # Split over workers, the shares still add up to exactly that.
    for workers in (2, 3):
        shares = [len(times_until(schedule, float(horizon), worker=w, workers=workers)) for w in range(workers)]
        assert sum(shares) == expected
        assert max(shares) - min(shares) <= 1


# --- worker splits ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "burstiness"), [("poisson", 1.0), ("gamma", 0.5), ("gamma", 4.0), ("constant", 1.0)])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_the_union_of_the_worker_shares_is_the_one_worker_schedule(kind: str, burstiness: float, workers: int) -> None:
    # Paired replay: the same seed gives the same arrivals (request index and offset) with any number of workers.
    schedule = ArrivalSchedule(kind, 40.0, burstiness)
    whole = times_until(schedule, 60.0, seed=SEED)
    shares = [times_until(schedule, 60.0, seed=SEED, worker=w, workers=workers) for w in range(workers)]
    assert list(heapq.merge(*shares)) == whole
    pairs = [list(islice(schedule_arrivals(schedule, SEED, w, workers), 500)) for w in range(workers)]
    union = sorted(p for share in pairs for p in share)
    n = min(share[-1][0] for share in pairs)  # every index up to here is in some share
    assert [p for p in union if p[0] <= n] == list(islice(schedule_arrivals(schedule, SEED), n + 1))
    if kind != "poisson":
        for w, share in enumerate(shares):
            assert share == whole[w::workers]


def test_poisson_workers_run_independent_processes_of_their_share() -> None:
    # Thinning: each arrival of the one global process goes to a worker at random, so each share is a Poisson
    # process of R/W on its own (the colouring theorem), not the regular every-other-arrival of round robin.
    schedule = ArrivalSchedule("poisson", 30.0)
    a, b = (list(islice(schedule_times(schedule, SEED, worker=w, workers=2), 10_000)) for w in range(2))
    assert a != b
    for times in (a, b):
        # Each is Poisson of R/2: gap CV 1 (5σ, as above), mean gap 2/R (relative sd 1 %, 5 % is 5σ).
        gaps = _gaps(times)
        assert _cv(gaps) == pytest.approx(1.0, rel=0.05)
        assert statistics.fmean(gaps) == pytest.approx(2 / 30.0, rel=0.05)
    assert requested_rate(schedule, workers=2) == 15.0


def test_requested_rate() -> None:
    assert requested_rate(ArrivalSchedule("gamma", 12.0, 2.0)) == 12.0
    assert requested_rate(ArrivalSchedule("constant", 12.0), workers=3) == 4.0
    with pytest.raises(ValueError, match="workers must be a whole number >= 1"):
        requested_rate(ArrivalSchedule("constant", 12.0), workers=0)


@pytest.mark.parametrize(("worker", "workers"), [(2, 2), (-1, 2), (0, 0), (True, 2)])
def test_a_worker_outside_the_pool_is_refused(worker: int, workers: int) -> None:
    with pytest.raises(ValueError, match="worker"):
        schedule_times(ArrivalSchedule("poisson", 1.0), SEED, worker=worker, workers=workers)


# --- determinism --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "burstiness"), [("poisson", 1.0), ("gamma", 0.5), ("constant", 1.0)])
def test_the_same_seed_gives_the_same_schedule(kind: str, burstiness: float) -> None:
    schedule = ArrivalSchedule(kind, 20.0, burstiness)
    for workers in (1, 2):
        for w in range(workers):
            first = times_until(schedule, 50.0, seed=SEED, worker=w, workers=workers)
            assert first == times_until(schedule, 50.0, seed=SEED, worker=w, workers=workers)
    if kind != "constant":
        assert times_until(schedule, 50.0, seed=SEED) != times_until(schedule, 50.0, seed=SEED + 1)


def test_known_values_pin_the_draws() -> None:
    # Every worker process and every replay must draw the same times: a change here changes every seeded run.
    assert list(islice(poisson(1.0, seed=1), 3)) == pytest.approx(
        [0.39930530784782636, 1.0764251794272837, 1.4288360780201632], rel=1e-12
    )
    assert list(islice(gamma(1.0, 0.5, seed=1), 3)) == pytest.approx(
        [0.022615934346771744, 0.24134364336757025, 2.3464837242768675], rel=1e-12
    )


# --- the description and the registry ----------------------------------------------------------------------


def test_the_registry_lists_the_kinds_and_an_unknown_name_lists_them() -> None:
    registry = arrival_kinds()
    assert registry.names() == ["constant", "gamma", "poisson", "trace"]
    assert registry.get("poisson").split == "thinned"
    assert registry.get("gamma").split == registry.get("constant").split == registry.get("trace").split == "round_robin"
    with pytest.raises(KeyError, match=r"'bursty'.*\['constant', 'gamma', 'poisson', 'trace'\]"):
        registry.get("bursty")
    with pytest.raises(ValueError, match=r"arrival schedule 'Poisson' is not registered.*'poisson'"):
        ArrivalSchedule("Poisson", 1.0)


def test_a_fresh_registry_each_time() -> None:
    mine = arrival_kinds()
    mine.register("custom", mine.get("constant"))
    assert "custom" not in arrival_kinds()


@pytest.mark.parametrize(
    ("kind", "rate", "burstiness", "message"),
    [
        ("poisson", 0.0, 1.0, "rate must be a finite number of requests per second above 0, got 0.0"),
        ("poisson", -3, 1.0, "got -3"),
        ("constant", math.inf, 1.0, "got inf"),
        ("gamma", math.nan, 1.0, "got nan"),
        ("gamma", True, 1.0, "got True"),
        ("gamma", "10", 1.0, "got '10'"),
        ("gamma", 10.0, 0.0, "burstiness must be a finite number above 0"),
        ("gamma", 10.0, -1.0, r"1 = Poisson, < 1 burstier, > 1 more regular\), got -1.0"),
        ("gamma", 10.0, math.inf, "got inf"),
        ("poisson", 10.0, 2.0, "burstiness applies to 'gamma' only; 'poisson' has none"),
        ("constant", 10.0, 0.5, "burstiness applies to 'gamma' only; 'constant' has none"),
    ],
)
def test_invalid_numbers_are_refused_with_what_is_expected(
    kind: str, rate: float, burstiness: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ArrivalSchedule(kind, rate, burstiness)


def test_the_generators_check_their_numbers_too() -> None:
    with pytest.raises(ValueError, match="rate"):
        poisson(0.0)
    with pytest.raises(ValueError, match="burstiness"):
        gamma(1.0, 0.0)
    with pytest.raises(ValueError, match="horizon"):
        times_until(ArrivalSchedule("poisson", 1.0), math.inf)


def test_the_schedule_is_frozen_and_states_its_gap_cv() -> None:
    schedule = ArrivalSchedule("gamma", 5.0, 4.0)
    with pytest.raises(AttributeError):
        schedule.rate = 6.0  # type: ignore[misc]
    assert schedule.gap_cv == 0.5
    assert ArrivalSchedule("poisson", 5.0).gap_cv == 1.0
    assert ArrivalSchedule("constant", 5.0).gap_cv == 0.0
