"""The paired comparison of agent sessions: each variant's session durations against the baseline's, task by task.

Every variant runs the same seeded tasks (traffic/agent.py), so a task both ran in the window is a pair
(`SessionPairs`, keyed by the task). A session that failed or was cut is censored — above every completed one — on
its side of the pair, never dropped: dropping it would let a variant whose slowest tasks were still running at the
stop look faster (the tail bias of leaving truncated sessions out). Speedups and their intervals are the request
comparison's own (report/compare.py: the same bootstrap, seed rule and censoring), on `session_duration`; with fewer
than `MIN_PAIRS` pairs, each variant's duration histogram unpaired.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from loadgen.measure.aggregate import Aggregate
from loadgen.measure.sessions import SessionStats
from loadgen.report.compare import (
    COMPARE_STATS,
    CONFIDENCE,
    MIN_PAIRS,
    RESAMPLES,
    entry_seed,
    histogram_sample,
    pair_ms,
    paired_entries,
    unpaired_entries,
)

__all__ = ["session_comparison"]

_METRIC = "session_duration"


def _merged(agg: Aggregate, variant: str) -> SessionStats:
    out = SessionStats()
    for (v, _), s in agg.sessions.items():
        if v == variant:
            out.merge(s)
    return out


def session_comparison(
    agg: Aggregate,
    variants: list[str],
    baseline: str,
    seed: int,
    resamples: int = RESAMPLES,
    confidence: float = CONFIDENCE,
) -> list[dict[str, Any]]:
    """One entry per (non-baseline variant, stat) of their session durations against the baseline's; [] when the
    run had no agent sessions."""
    if not agg.sessions:
        return []
    keys_b, dur_b = agg.session_pairs.samples(baseline)
    base = _merged(agg, baseline)
    out: list[dict[str, Any]] = []
    for v in variants:
        if v == baseline:
            continue
        keys_v, dur_v = agg.session_pairs.samples(v)
        _, ib, iv = np.intersect1d(
            np.frombuffer(keys_b, dtype=np.int64), np.frombuffer(keys_v, dtype=np.int64), return_indices=True
        )
        a = pair_ms(np.frombuffer(dur_b, dtype=np.int64)[ib])
        b = pair_ms(np.frombuffer(dur_v, dtype=np.int64)[iv])
        entries: list[dict[str, Any]] = [
            {"variant": v, "baseline": baseline, "metric": _METRIC, "stat": st} for st, _ in COMPARE_STATS
        ]
        seed_v = entry_seed(seed, v, _METRIC)
        if len(a) >= MIN_PAIRS:
            paired_entries(entries, a, b, resamples, confidence, seed_v)
        else:
            other = _merged(agg, v)
            sa = histogram_sample(base.duration, base.censored)
            sb = histogram_sample(other.duration, other.censored)
            unpaired_entries(entries, sa, sb, "histograms", resamples, confidence, seed_v)
        for e in entries:
            e |= {"resamples": resamples, "confidence": confidence, "seed": seed_v}
        out += entries
    return out
