"""Why latency is what it is: the latency model the seeds use, fitted per variant on the run's own requests.

    TTFT ≈ a + b · uncached prompt tokens [+ b_c · cached prompt tokens] [+ q · requests in flight at send]
    E2E  ≈ TTFT + TPOT · (tokens after the first chunk)

`a` is the fixed overhead (network, HTTP, one forward pass: at zero load when the load term is in the fit), `b` the
prefill cost per prompt token, `b_c` the cost per prompt token served from the prefix cache (only when the server
reports cached tokens and some requests had some), `q` what each request already in flight adds (only when the
load varied over the run: in a closed loop it barely does, and the intercept then holds whatever queueing there
was). The first chunk's tokens are TTFT's, so E2E's slope runs over the tokens after it, as `RequestRecord.tpot`
counts them (with one token per chunk that is n − 1).

The TTFT fit is a robust least squares (Huber's M-estimate: a request far off the line weighs less, so one stalled
step does not tilt it) on the sampled successful requests (measure/latency_samples.py: a hash sample of at most
2,000 requests per variant); the intervals are bootstrap percentile intervals over requests (200 resamples, seeded
by the scenario's seed), which hold whatever the residuals' spread does with prompt length. The residual spread is
the residuals' standard deviation and the 90th percentile of their size (all requests, outliers included).

Requests in flight at a request's send are estimated from the sample itself: the sampled requests (failed ones
included) whose [send, completion] holds that send, times the requests each sampled one stands for. TTFT is called
dominated by queueing when the load term explains at least half of the mean TTFT (the server's own queue time, when
it exports one, is judged in report/server_split.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.measure.latency_samples import LatencySamples
from loadgen.report.numbers import AS_SET, SHARE, percent

__all__ = ["FIT_CONFIDENCE", "FIT_RESAMPLES", "QUEUEING_SHARE", "fit_latency", "fit_table"]

FIT_RESAMPLES = 200
FIT_CONFIDENCE = 0.95
# Queueing dominates TTFT when it is at least this share of the mean TTFT.
QUEUEING_SHARE = 0.5
_MIN_REQUESTS = 8
# Huber's tuning constant (95 % efficiency under normal residuals) and the IRLS iterations at most.
_HUBER_K = 1.345
_HUBER_ITERATIONS = 20
# The load term joins the fit only when the in-flight estimate varied: its coefficient of variation at least this.
_MIN_LOAD_CV = 0.1


def _interval(value: float, boot: np.ndarray, scale: float) -> dict[str, float]:
    a = (1 - FIT_CONFIDENCE) / 2
    lo, hi = np.quantile(boot, [a, 1 - a]) if len(boot) else (np.nan, np.nan)
    return {
        "value": round(float(value) * scale, 6),
        "ci_low": round(float(lo) * scale, 6),
        "ci_high": round(float(hi) * scale, 6),
    }


def _ols(x: np.ndarray, y: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    if w is not None:
        r = np.sqrt(w)
        x, y = x * r[:, None], y * r
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    return np.asarray(coef)


def _huber(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Huber's M-estimate by iteratively reweighted least squares: (coefficients, the final weights). A request
    whose residual is beyond `_HUBER_K` robust standard deviations (1.4826 × the median |residual|) weighs
    k / |r| of one: a stalled step or a scheduling hiccup cannot pull the slopes, as it does a plain least squares
    on a few dozen requests."""
    w = np.ones(len(y))
    coef = _ols(x, y)
    for _ in range(_HUBER_ITERATIONS):
        resid = y - x @ coef
        scale = 1.4826 * float(np.median(np.abs(resid)))
        if scale <= 0:
            break
        a = np.abs(resid) / (_HUBER_K * scale)
        w = np.where(a <= 1, 1.0, 1.0 / np.maximum(a, 1e-12))
        new = _ols(x, y, w)
        if np.allclose(new, coef, rtol=1e-6, atol=1e-9):
            coef = new
            break
        coef = new
    return coef, w


def _spread(resid: np.ndarray, y: np.ndarray) -> dict[str, float | None]:
    var = float(np.var(y))
    return {
        "residual_sd_ms": round(float(np.std(resid)) / 1000, 3),
        "residual_p90_abs_ms": round(float(np.quantile(np.abs(resid), 0.9)) / 1000, 3),
        "r2": round(1 - float(np.var(resid)) / var, 4) if var > 0 else None,
    }


def _in_flight(sent: np.ndarray, done: np.ndarray, weight: int) -> np.ndarray:
    """Per request, the requests of the sample (times `weight`) whose [send, completion) holds its send, itself out."""
    starts, ends = np.sort(sent), np.sort(done)
    began = np.searchsorted(starts, sent, side="right")  # sent at or before it (itself included)
    ended = np.searchsorted(ends, sent, side="right")  # done at or before its send
    return (began - ended - 1).clip(min=0) * weight


def fit_table(t: dict[str, list[int]], weight: int = 1, seed: int = 0) -> dict[str, Any] | None:
    """The fit of one variant's sampled rows (`LatencySamples.table`); None with too few requests to fit."""
    ok = np.asarray(t["ok"], dtype=bool)
    ttft = np.asarray(t["ttft_us"], dtype=float)
    use = ok & (ttft >= 0) & (np.asarray(t["prompt_tokens"]) >= 0)
    n = int(use.sum())
    if n < _MIN_REQUESTS:
        return None
    load_all = _in_flight(np.asarray(t["sent_ms"], dtype=float), np.asarray(t["done_ms"], dtype=float), weight)
    prompt = np.asarray(t["prompt_tokens"], dtype=float)[use]
    cached_raw = np.asarray(t["cached_tokens"], dtype=float)[use]
    cached = cached_raw.clip(min=0)
    uncached = prompt - cached
    y = ttft[use]
    load = load_all[use].astype(float)
    cols, names = [np.ones(n), uncached], ["intercept", "uncached"]
    if (cached_raw >= 0).any() and np.ptp(cached) > 0:
        cols.append(cached)
        names.append("cached")
    load_mean = float(load.mean())
    if load_mean > 0 and float(load.std()) / load_mean >= _MIN_LOAD_CV:
        cols.append(load)
        names.append("load")
    x = np.column_stack(cols)
    coef, w = _huber(x, y)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(FIT_RESAMPLES, n))
    # Each resample keeps its requests' weights from the whole fit (one weighted least squares, not a new IRLS).
    boot = np.array([_ols(x[i], y[i], w[i]) for i in idx])
    # E2E − TTFT = TPOT · tokens after the first chunk: least squares through the origin.
    dec = np.asarray(t["decode_tokens"], dtype=float)[use]
    e2e = np.asarray(t["e2e_us"], dtype=float)[use]
    has = (dec > 0) & (e2e >= 0)
    c = {name: float(coef[i]) for i, name in enumerate(names)}
    out: dict[str, Any] = {
        "n": n,
        "requests_per_sample": weight,
        "prompt_tokens_from": _prompt_source(np.asarray(t["prompt_from_usage"])[use]),
        "cached_reported": bool((cached_raw >= 0).any()),
        "ttft": {
            "intercept_ms": _interval(c["intercept"], boot[:, 0], 1e-3),
            "prefill_ms_per_token": _interval(c["uncached"], boot[:, 1], 1e-3),
            "cached_ms_per_token": (
                _interval(c["cached"], boot[:, names.index("cached")], 1e-3) if "cached" in c else None
            ),
            "ms_per_request_in_flight": (
                _interval(c["load"], boot[:, names.index("load")], 1e-3) if "load" in c else None
            ),
            "mean_ms": round(float(y.mean()) / 1000, 3),
            **_spread(y - x @ coef, y),
        },
        "e2e": _tpot_fit(dec[has], (e2e - y)[has], e2e[has], y[has], rng),
        "in_flight_mean": round(load_mean, 2),
    }
    out["queueing"] = _queueing(c, boot, names, load_mean, float(y.mean()))
    return out


def _prompt_source(from_usage: np.ndarray) -> str:
    if from_usage.all():
        return "usage"
    return "target" if not from_usage.any() else "mixed"


def _tpot_fit(
    dec: np.ndarray, decode_us: np.ndarray, e2e: np.ndarray, ttft: np.ndarray, rng: np.random.Generator
) -> dict[str, Any] | None:
    n = len(dec)
    if n < _MIN_REQUESTS:
        return None
    tpot = float(dec @ decode_us / (dec @ dec))
    idx = rng.integers(0, n, size=(FIT_RESAMPLES, n))
    boot = np.array([float(dec[i] @ decode_us[i] / (dec[i] @ dec[i])) for i in idx])
    return {"n": n, "tpot_ms": _interval(tpot, boot, 1e-3), **_spread(e2e - (ttft + tpot * dec), e2e)}


def _queueing(
    c: dict[str, float], boot: np.ndarray, names: list[str], load_mean: float, ttft_mean: float
) -> dict[str, Any]:
    """Whether the client's view says TTFT is mostly queueing: the load term's share of the mean TTFT."""
    if "load" not in c:
        return {
            "load_share": None,
            "dominated": None,
            "why": "the number of requests in flight barely varied over the run: queueing cannot be told apart from "
            "the fixed overhead on the client's side (the intercept holds both)",
        }
    share = c["load"] * load_mean / ttft_mean if ttft_mean > 0 else 0.0
    low = float(np.quantile(boot[:, names.index("load")], (1 - FIT_CONFIDENCE) / 2))
    dominated = bool(share >= QUEUEING_SHARE and low > 0)
    share = float(share)
    return {
        "load_share": round(share, 4),
        "dominated": dominated,
        "why": (
            f"requests in flight at the send explain {percent(share, SHARE)} of the mean TTFT"
            + (" (at least half): TTFT is dominated by queueing" if dominated else "")
        ),
    }


def fit_latency(samples: LatencySamples, variant: str, seed: int = 0) -> dict[str, Any] | None:
    """The report's `variants[].latency_fit` (None: too few sampled requests)."""
    fit = fit_table(samples.table(variant), samples.weight, seed)
    if fit is not None:
        fit["method"] = (
            f"robust least squares (Huber) on a hash sample of the window's successful requests, TPOT through the "
            f"origin; {FIT_RESAMPLES} bootstrap resamples over requests, {percent(FIT_CONFIDENCE, AS_SET)} percentile "
            "intervals"
        )
    return fit
