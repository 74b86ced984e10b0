"""An always-valid test of a failure share: Robbins' beta-binomial mixture confidence sequence.

`stop_when.slo_breached` in closed loop (measure/early_stop.py) asks, twice a second for the whole run, whether a
variant's share of failed requests is above what an SLO allows. A fixed-sample bound (a Wilson interval at 99.9 %)
asked again and again is wrong far more often than it says: looked at after every request up to 5,000 at a true
share equal to the allowed 1 %, it stops about 6 % of the runs that meet the SLO, not 0.1 % (17 %, not 1 %, at 99 %;
tests/unit/test_confidence_sequence.py simulates it). This test keeps its error rate however many times, and
whenever, it is looked at.

The method. Let S of n requests have failed (F = n − S), and q be a failure share. The Bayes factor of a Beta(½, ½)
mixture of failure shares r against q,

    M_n(q) = ∫ r^S (1 − r)^F dBeta(r; ½, ½) / (q^S (1 − q)^F) = B(½ + S, ½ + F) / (B(½, ½) · q^S · (1 − q)^F),

is, when the true share is q, a nonnegative martingale in n with M_0 = 1 (a mixture of likelihood ratios, each a
martingale of mean 1). By Ville's inequality, P(M_n(q) ≥ 1/α for some n) ≤ α: the set C_n = {q : M_n(q) < 1/α} holds
the true share at every n at once with probability ≥ 1 − α — a confidence sequence. log M_n(q) is convex in q with its
least value (≤ 0) at q = S/n, so C_n is an interval around S/n; its lower end is `lower_bound`. The rule stops when
that lower end is above the allowed share p0, i.e. S/n > p0 and M_n(p0) ≥ 1/α (`breached`). If the true share p is
at most p0, such a stop means C_n missed p (every q ≤ p0 < S/n is outside it too): so P(ever stopped) ≤ α, under
continuous monitoring, for any schedule of looks and any number of them, and whatever `min_requests` skips. Counts
merged from many processes are still counts of one stream of requests in the order they ended.

The prior is Jeffreys' Beta(½, ½) (the Krichevsky–Trofimov mixture): it has no knob to tune, and its cost against
the best single alternative is about ½ log n nats whatever the true share, so small allowed shares (p99.9) and large
ones (a 50 % success rate) are tested alike. Its mass below p0 is spent on the lower side of the interval, which the
rule never uses: the test is a little conservative (at p0 = 1 %, about 6 % of the prior, 0.07 nats).

References: H. Robbins (1970), "Statistical methods related to the law of the iterated logarithm", Ann. Math.
Statist. 41(5), 1397–1409; T. L. Lai (1976), "On confidence sequences", Ann. Statist. 4(2), 265–280; S. R. Howard,
A. Ramdas, J. McAuliffe, J. Sekhon (2021), "Time-uniform, nonparametric, nonasymptotic confidence sequences", Ann.
Statist. 49(2), 1055–1080. The closed form needs only `math.lgamma`: no dependency (scipy is none of loadgen's).
"""

from __future__ import annotations

import math

__all__ = ["METHOD", "REFERENCE", "breached", "log_evidence", "lower_bound"]

METHOD = "Robbins' beta-binomial mixture confidence sequence, Jeffreys prior"
REFERENCE = "Robbins 1970; Lai 1976; Howard et al. 2021"
_A = _B = 0.5  # Jeffreys' prior
_LOG_BETA_PRIOR = math.lgamma(_A) + math.lgamma(_B) - math.lgamma(_A + _B)  # log B(½, ½) = log π


def _log_mixture(failed: int, n: int) -> float:
    """log of ∫ r^S (1 − r)^F dBeta(r; ½, ½): the mixture's probability of the S failures and F successes seen."""
    s, f = failed, n - failed
    return math.lgamma(_A + s) + math.lgamma(_B + f) - math.lgamma(_A + _B + n) - _LOG_BETA_PRIOR


def _log_likelihood(failed: int, n: int, share: float) -> float:
    """log q^S (1 − q)^F, with 0^0 = 1 (−inf when a count the share makes impossible was seen)."""
    s, f = failed, n - failed
    out = 0.0
    if s:
        out += s * math.log(share) if share > 0 else -math.inf
    if f:
        out += f * math.log1p(-share) if share < 1 else -math.inf
    return out


def log_evidence(failed: int, n: int, share: float) -> float:
    """log M_n(share): the evidence, in nats, that the failure share is not `share` (+inf when a count `share`
    makes impossible was seen: a failure at share 0)."""
    if not 0 <= failed <= n:
        raise ValueError(f"{failed} failed of {n}")
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"share {share} is not in [0, 1]")
    return _log_mixture(failed, n) - _log_likelihood(failed, n, share)


def breached(failed: int, n: int, share: float, alpha: float) -> bool:
    """Whether the failure share is above `share`, with a chance of at most `alpha` of ever saying so (at any of
    any number of looks) while it is not: S/n > share and M_n(share) ≥ 1/alpha."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha {alpha} is not in (0, 1)")
    if failed <= share * n:
        return False
    return log_evidence(failed, n, share) >= -math.log(alpha)


def lower_bound(failed: int, n: int, alpha: float) -> float:
    """The lower end of the confidence sequence at 1 − alpha: the least share q that M_n(q) < 1/alpha keeps
    (0 with no failure). Above the allowed share exactly when `breached` says so (to 1e-12)."""
    if failed <= 0 or n <= 0:
        return 0.0
    threshold = -math.log(alpha)
    lo, hi = 0.0, failed / n  # log M_n is +inf at 0 and ≤ 0 at S/n, decreasing between
    for _ in range(100):
        mid = (lo + hi) / 2
        if log_evidence(failed, n, mid) >= threshold:
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12:
            break
    return hi
