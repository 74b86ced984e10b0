"""Grading a client against the server's truth log.

Two views, both in milliseconds:
- *reported*: the percentiles a tool reports (TTFT, per-token ITL) minus the same percentiles of the truth
  (server: first-chunk write − request arrival; per-token gaps between writes). Works for any tool, peers included.
- *paired* (clients that send `X-Request-Id` and keep raw records: loadgen and the baselines): per request, client
  first-token arrival − server first-chunk write, and per chunk, (client gap − server gap) / k.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.common import quantile, weighted_quantile
from loadgen.sim.truth import TruthRequest, load_truth

__all__ = ["Grade", "Truth", "grade_records", "read_records"]


@dataclass
class Truth:
    requests: dict[str, TruthRequest]
    ttft_ms: list[float]
    itl_ms: list[tuple[float, int]]
    chunks_per_s: float
    requests_per_s: float
    window_s: float

    @classmethod
    def load(cls, path: Path, ramp_s: float = 1.0) -> Truth:
        reqs = load_truth(path)
        ttft, itl = [], []
        starts = [r.arrival for r in reqs.values() if r.arrival is not None]
        ends = [r.chunk_times[-1] for r in reqs.values() if r.chunk_times]
        for r in reqs.values():
            if r.arrival is None or not r.chunk_times or r.aborted:
                continue
            ttft.append((r.chunk_times[0] - r.arrival) * 1e3)
            c, n = r.chunk_times, r.chunk_tokens
            itl += [((c[i] - c[i - 1]) / n[i] * 1e3, n[i]) for i in range(1, len(c))]
        # Steady state: after the ramp-up, before the last second (clients stop at different moments). Counted from
        # request *arrivals*: a closed-loop client sends its next request only once it has read the previous one to
        # the end, whereas the server's writes run ahead into socket buffers when the client falls behind.
        chunks_ps = reqs_ps = window = 0.0
        if starts and ends:
            lo, hi = min(starts) + ramp_s, max(ends) - 1.0
            if hi - lo < 1.0:
                lo, hi = min(starts), max(ends)
            window = max(hi - lo, 1e-9)
            done = [r for r in reqs.values() if r.finish is not None and not r.aborted and r.chunk_times]
            per_req = sum(len(r.chunk_times) for r in done) / len(done) if done else 0.0
            arrived = sum(1 for r in reqs.values() if r.arrival is not None and lo <= r.arrival < hi)
            reqs_ps = arrived / window
            chunks_ps = reqs_ps * per_req
        return cls(reqs, ttft, itl, chunks_ps, reqs_ps, window)

    def pcts(self) -> dict[str, float]:
        return {
            "ttft_p50": quantile(self.ttft_ms, 0.5),
            "ttft_p99": quantile(self.ttft_ms, 0.99),
            "itl_p50": weighted_quantile(self.itl_ms, 0.5),
            "itl_p99": weighted_quantile(self.itl_ms, 0.99),
        }


@dataclass
class Grade:
    """One client run, graded. `reported` holds what the tool itself said (ms); `paired` the per-request errors."""

    client: str
    requests: int = 0
    reported: dict[str, float] = field(default_factory=dict)
    paired: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    note: str = ""

    def added(self, truth: dict[str, float]) -> dict[str, float]:
        r = self.reported
        return {
            "ttft_p50": r.get("ttft_p50", float("nan")) - truth["ttft_p50"],
            "ttft_p99": r.get("ttft_p99", float("nan")) - truth["ttft_p99"],
            "itl_p50": r.get("itl_p50", float("nan")) - truth["itl_p50"],
            "itl_p99": r.get("itl_p99", float("nan")) - truth["itl_p99"],
        }


def read_records(directory: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for shard in sorted(directory.glob("records-*.jsonl")):
        rows += [orjson.loads(line) for line in shard.read_bytes().splitlines() if line.strip()]
    return rows


def grade_records(client: str, records: Iterable[dict[str, Any]], truth: Truth) -> Grade:
    """Reported percentiles computed from raw records, and the paired errors against the truth."""
    ttft, itl = [], []
    ttft_err, itl_err = [], []
    errors = 0
    n = 0
    for r in records:
        n += 1
        c, k = r["chunk_times"], r["chunk_tokens"]
        if r.get("error") is not None or not c:
            errors += 1
            continue
        ttft.append((c[0] - r["sent"]) * 1e3)
        itl += [((c[i] - c[i - 1]) / k[i] * 1e3, k[i]) for i in range(1, len(c)) if k[i] > 0]
        t = truth.requests.get(r["id"])
        if t is None or t.chunk_tokens != k:
            continue
        s = t.chunk_times
        ttft_err.append((c[0] - s[0]) * 1e3)
        itl_err += [abs((c[i] - c[i - 1]) - (s[i] - s[i - 1])) / k[i] * 1e3 for i in range(1, len(c))]
    g = Grade(client, requests=n - errors)
    g.reported = {
        "ttft_p50": quantile(ttft, 0.5),
        "ttft_p99": quantile(ttft, 0.99),
        "itl_p50": weighted_quantile(itl, 0.5),
        "itl_p99": weighted_quantile(itl, 0.99),
    }
    if ttft_err:
        g.paired = {
            "ttft_p50": quantile(ttft_err, 0.5),
            "ttft_p99": quantile(ttft_err, 0.99),
            "itl_abs_p50": quantile(itl_err, 0.5),
            "itl_abs_p99": quantile(itl_err, 0.99),
            "matched": float(len(ttft_err)),
        }
    if errors:
        g.note = f"{errors} failed"
    return g
