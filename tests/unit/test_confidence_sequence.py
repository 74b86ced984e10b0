"""measure/confidence_sequence.py: `stop_when.slo_breached`'s closed-loop test keeps its error rate however often it
is looked at, where the per-look Wilson bound it replaced does not; and it still stops a clearly failing variant.

The simulation: seeded streams of requests whose failure share is exactly the allowed one (1 %: a success rate ≥
99 % SLO), looked at after every request from the 50th (`min_requests`) to the 5,000th. The share of runs stopped
must be at most 1 − confidence, give or take three binomial standard errors of the Monte-Carlo estimate; the old
rule, run on the very same streams, must exceed that, or the test proves nothing. The whole file runs in a few
seconds: the test's evidence is computed for every request of every run at once from a table of log-gamma values,
and checked against `log_evidence` itself wherever a run first crosses.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from loadgen.measure import confidence_sequence as cs

RUNS, REQUESTS, MIN_REQUESTS = 2000, 5000, 50
SHARE = 0.01  # allowed failure share: success_rate min_percent 99
_N = np.arange(1, REQUESTS + 1)
_LG_HALF = np.array([math.lgamma(k + 0.5) for k in range(REQUESTS + 1)])  # log Γ(k + ½)
_LG_WHOLE = np.array([math.lgamma(k + 1.0) for k in range(REQUESTS + 1)])  # log Γ(k + 1) = log k!


def wilson_lower(failed: int, n: int, confidence: float) -> float:
    """The rule's old statistic: the one-sided Wilson score lower bound of a proportion, valid for one look."""
    if n <= 0:
        return 0.0
    z = NormalDist().inv_cdf(confidence)
    p = failed / n
    centre = p + z * z / (2 * n)
    spread = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, (centre - spread) / (1 + z * z / n))


def _wilson_lower(failed: np.ndarray, confidence: float) -> np.ndarray:
    z = NormalDist().inv_cdf(confidence)
    p = failed / _N
    centre = p + z * z / (2 * _N)
    spread = z * np.sqrt(p * (1 - p) / _N + z * z / (4 * _N * _N))
    return (centre - spread) / (1 + z * z / _N)


def _log_evidence(failed: np.ndarray, share: float) -> np.ndarray:
    """`cs.log_evidence` for every request of every run: log B(½ + S, ½ + F) − log B(½, ½) − S log q − F log(1 − q)
    (Γ(1) = 1, B(½, ½) = π)."""
    ok = _N - failed
    mixture = _LG_HALF[failed] + _LG_HALF[ok] - _LG_WHOLE[_N] - math.log(math.pi)
    return mixture - failed * math.log(share) - ok * math.log1p(-share)


def _streams(share: float, runs: int, seed: int) -> np.ndarray:
    """Failures so far after each request (runs × REQUESTS), each request failing with chance `share`."""
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.random((runs, REQUESTS)) < share, axis=1, dtype=np.int64)


def _first_stop(decided: np.ndarray) -> np.ndarray:
    """The request count at which each run first stops (REQUESTS + 1: never), looking from MIN_REQUESTS on."""
    decided = decided & (_N >= MIN_REQUESTS)
    return np.where(decided.any(axis=1), decided.argmax(axis=1) + 1, REQUESTS + 1)


def _new_rule(failed: np.ndarray, share: float, alpha: float) -> np.ndarray:
    return (failed > share * _N) & (_log_evidence(failed, share) >= -math.log(alpha))


def _agrees_with_the_package(failed: np.ndarray, share: float, alpha: float, stops: np.ndarray) -> None:
    """The vectorised rule is the package's: at each stop it says breached and the request before it did not, with
    the same evidence."""
    for run in np.flatnonzero(stops <= REQUESTS)[:25]:
        n = int(stops[run])
        s = int(failed[run, n - 1])
        assert cs.log_evidence(s, n, share) == pytest.approx(float(_log_evidence(failed[run], share)[n - 1]), abs=1e-9)
        assert cs.breached(s, n, share, alpha) and cs.lower_bound(s, n, alpha) > share
        if n > MIN_REQUESTS:
            assert not cs.breached(int(failed[run, n - 2]), n - 1, share, alpha)


def _margin(alpha: float) -> float:
    return 3 * math.sqrt(alpha * (1 - alpha) / RUNS)


@pytest.fixture(scope="module")
def at_the_allowed_share() -> np.ndarray:
    return _streams(SHARE, RUNS, seed=20260131)


@pytest.mark.parametrize("confidence", [0.99, 0.999])
def test_looked_at_after_every_request_it_stops_no_more_than_its_error_rate(
    at_the_allowed_share: np.ndarray, confidence: float
) -> None:
    failed, alpha = at_the_allowed_share, 1 - confidence
    bound = alpha + _margin(alpha)
    new_stops = _first_stop(_new_rule(failed, SHARE, alpha))
    old_stops = _first_stop(_wilson_lower(failed, confidence) > SHARE)
    new_rate, old_rate = float(np.mean(new_stops <= REQUESTS)), float(np.mean(old_stops <= REQUESTS))
    print(f"\nconfidence {confidence}: false stops {100 * new_rate:.2f} % (sequential) vs {100 * old_rate:.2f} % "
          f"(Wilson at each look); bound {100 * bound:.2f} % = {100 * alpha:g} % + 3 s.e.")  # fmt: skip
    assert new_rate <= bound
    assert old_rate > 5 * bound  # the contrast: the rule this replaced, on the same streams, breaks its own promise
    _agrees_with_the_package(failed, SHARE, alpha, new_stops)


def test_below_the_allowed_share_it_stops_even_less() -> None:
    failed, alpha = _streams(SHARE / 2, 500, seed=7), 0.01
    assert float(np.mean(_first_stop(_new_rule(failed, SHARE, alpha)) <= REQUESTS)) <= alpha / 10


def test_it_stops_a_variant_failing_three_times_the_allowed_share_within_a_bounded_count() -> None:
    """Power at the default confidence (99.9 %): 3 % failing where 1 % is allowed."""
    failed, alpha = _streams(3 * SHARE, 500, seed=11), 0.001
    stops = _first_stop(_new_rule(failed, SHARE, alpha))
    stopped = float(np.mean(stops <= REQUESTS))
    median, p99 = np.percentile(stops, [50, 99])
    print(f"\n3x the allowed share: {100 * stopped:.1f} % stopped by {REQUESTS}; median {median:.0f}, p99 {p99:.0f}")
    assert stopped >= 0.99 and median <= 1_000
    _agrees_with_the_package(failed, SHARE, alpha, stops)
    # Every request failing: stopped at the first look (min_requests), at any allowed share below it.
    for share in (0.0, 0.001, 0.1, 0.5):
        assert cs.breached(MIN_REQUESTS, MIN_REQUESTS, share, alpha)


def test_the_evidence_matches_the_closed_form_by_hand() -> None:
    # One request: the mixture gives it probability ½ whatever it is (B(3/2, ½) / B(½, ½) = (π/2) / π).
    assert cs.log_evidence(1, 1, 0.01) == pytest.approx(math.log(0.5 / 0.01))
    assert cs.log_evidence(0, 1, 0.5) == pytest.approx(0.0)
    # Two failures of two: B(5/2, ½) / π = 3/8.
    assert cs.log_evidence(2, 2, 0.1) == pytest.approx(math.log(0.375 / 0.01))
    assert cs.log_evidence(1, 5, 0.0) == math.inf and cs.breached(1, 5, 0.0, 0.001)  # a share of 0: one is proof
    assert not cs.breached(0, 5000, 0.0, 0.001) and not cs.breached(5000, 5000, 1.0, 0.001)
    assert not cs.breached(1, 50, 0.01, 0.001)  # at the point estimate's side of the allowance: never a stop
    with pytest.raises(ValueError):
        cs.log_evidence(3, 2, 0.1)


def test_the_lower_bound_is_the_stop_decision() -> None:
    rng = np.random.default_rng(3)
    for _ in range(300):
        n = int(rng.integers(1, 20_000))
        failed, share = int(rng.integers(0, n + 1)), float(rng.uniform(0, 0.6))
        alpha = float(rng.choice([0.1, 0.01, 0.001]))
        low = cs.lower_bound(failed, n, alpha)
        assert 0.0 <= low <= failed / n
        if abs(cs.log_evidence(failed, n, share) + math.log(alpha)) > 1e-6:  # away from the edge
            assert (low > share) == cs.breached(failed, n, share, alpha), (failed, n, share, alpha)
    # Wider than the one-look Wilson bound: the price of looking at every request.
    assert cs.lower_bound(40, 50, 0.05) < wilson_lower(40, 50, 0.95)


def test_wilson_lower_bound_matches_the_closed_form() -> None:
    """The contrast's statistic is the old rule's exactly."""
    # 40 of 50 at z = 1.64485 (95 % one-sided), by hand: (0.8 + z²/100 − z·sqrt(0.16/50 + z²/10⁴)) / (1 + z²/50)
    # = (0.827055 − 0.096901) / 1.054111 = 0.69267.
    assert wilson_lower(40, 50, 0.95) == pytest.approx(0.69267, abs=1e-5)
    assert wilson_lower(0, 50, 0.999) == 0.0
    assert wilson_lower(50, 50, 0.999) < 1.0
    failed = np.minimum(_N, 40)
    assert float(_wilson_lower(failed, 0.95)[49]) == pytest.approx(wilson_lower(40, 50, 0.95), abs=1e-12)
