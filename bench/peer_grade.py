"""A tool's per-request output graded against the bench server's truth log, request by request.

Every figure is over the steady state: requests that arrived from 1 s after the first arrival (connections opened,
workers spawned) to 1 s before the last write, the window the throughput is counted over too.

- added TTFT: the tool's TTFT of a request minus the truth's (first token write − the kernel's receive stamp of the
  request), p50 / p99 over the requests.
- ITL as reported: the tool's own ITL percentile (its summary, however it defines ITL) minus the truth's per-token
  percentile (a chunk of k tokens after a gap g is k samples of g / k).
- request ITL error: the tool's per-request ITL minus the truth's, (last write − first write) / (tokens after the first
  chunk), p50 / p99 of the absolute error.
- chunk timing error: where the tool keeps each chunk's time, |tool gap − server gap| / k per chunk, p50 / p99.
- parity: the prompt and output tokens the tool counted against what the server read and wrote for the same requests.
- CPU per request: the tool's process-group CPU across the window over the requests that arrived in it.
- arrivals (open loop): the gaps between the server's receive stamps against 1 / rate, and each arrival against its
  slot on a 1 / rate grid anchored at the window's first (steady state, as above).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench.common import quantile
from bench.grading import Truth
from bench.peer_outputs import PeerRequest, PeerSummary
from loadgen.sim.truth import TruthRequest

__all__ = ["TruthIndex", "arrival_parity", "cpu_over", "grade"]

RAMP_S = 1.0


@dataclass
class TruthIndex:
    truth: Truth
    by_rid: dict[str, TruthRequest]
    by_key: dict[str, list[TruthRequest]]
    prompt_words: dict[str, int]
    lo: float
    hi: float

    @classmethod
    def load(cls, path: Path) -> TruthIndex:
        truth = Truth.load(path, ramp_s=RAMP_S)
        by_key: dict[str, list[TruthRequest]] = {}
        words: dict[str, int] = {}
        for line in path.read_bytes().splitlines():
            if b'"arrival"' not in line:
                continue
            rec = orjson.loads(line)
            req = truth.requests.get(rec["rid"])
            if req is None or rec.get("kind") != "arrival":
                continue
            by_key.setdefault(rec.get("key", ""), []).append(req)
            words[req.rid] = int(rec.get("prompt_words", 0))
        for reqs in by_key.values():
            reqs.sort(key=lambda r: r.arrival or 0.0)
        arrivals = [r.arrival for r in truth.requests.values() if r.arrival is not None]
        ends = [r.chunk_times[-1] for r in truth.requests.values() if r.chunk_times]
        lo = min(arrivals) + RAMP_S if arrivals else 0.0
        hi = max(ends) - 1.0 if ends else 0.0
        if hi - lo < 1.0 and arrivals and ends:
            lo, hi = min(arrivals), max(ends)
        return cls(truth, truth.requests, by_key, words, lo, hi)

    def find(self, match: str) -> TruthRequest | None:
        kind, _, value = match.partition(":")
        if kind == "rid":
            return self.by_rid.get(value)
        reqs = self.by_key.get(value)
        return reqs.pop(0) if reqs else None  # the same prompt twice: the earlier arrival first

    def steady(self, t: TruthRequest) -> bool:
        return t.arrival is not None and self.lo <= t.arrival < self.hi


def _truth_ttft_ms(t: TruthRequest) -> float:
    return (t.chunk_times[0] - t.arrival) * 1e3 if t.arrival is not None else math.nan


def _truth_itl_ms(t: TruthRequest) -> float | None:
    after = sum(t.chunk_tokens) - t.chunk_tokens[0]
    return (t.chunk_times[-1] - t.chunk_times[0]) * 1e3 / after if after > 0 else None


def _pcts(values: list[float], name: str, digits: int = 3) -> dict[str, float | None]:
    if not values:
        return {f"{name}_p50": None, f"{name}_p99": None}
    return {f"{name}_p50": round(quantile(values, 0.5), digits), f"{name}_p99": round(quantile(values, 0.99), digits)}


def cpu_over(samples: list[tuple[float, float]], lo: float, hi: float) -> float | None:
    """CPU seconds the tool used between monotonic times lo and hi (linear between the samples around each)."""

    def at(t: float) -> float | None:
        for (t0, c0), (t1, c1) in zip(samples, samples[1:], strict=False):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
        return None

    a, b = at(lo), at(hi)
    return None if a is None or b is None else b - a


def grade(
    records: list[PeerRequest],
    summary: PeerSummary,
    index: TruthIndex,
    samples: list[tuple[float, float]] | None = None,
) -> dict[str, Any]:
    """One tool run's figures (ms unless named otherwise)."""
    tp = index.truth.pcts()
    ttft_err, itl_err, chunk_err = [], [], []
    matched = unmatched = failed = 0
    tool_in = tool_out = server_in = server_out = 0
    counted_in = counted_out = 0
    for r in records:
        t = index.find(r.match)
        if not r.ok:
            failed += 1
            continue
        if t is None or not t.chunk_times or t.arrival is None:
            unmatched += 1
            continue
        matched += 1
        if r.input_tokens is not None:
            counted_in += 1
            tool_in += r.input_tokens
            server_in += index.prompt_words.get(t.rid, 0)
        if r.output_tokens is not None:
            counted_out += 1
            tool_out += r.output_tokens
            server_out += sum(t.chunk_tokens)
        if not index.steady(t):
            continue
        if r.ttft_ms is not None:
            ttft_err.append(r.ttft_ms - _truth_ttft_ms(t))
        truth_itl = _truth_itl_ms(t)
        if r.itl_ms is not None and truth_itl is not None:
            itl_err.append(abs(r.itl_ms - truth_itl))
        if r.chunk_gaps_ms is not None and len(r.chunk_gaps_ms) == len(t.chunk_times) - 1:
            c, k = t.chunk_times, t.chunk_tokens
            chunk_err += [abs(g - (c[i + 1] - c[i]) * 1e3) / k[i + 1] for i, g in enumerate(r.chunk_gaps_ms)]
    steady = sum(1 for t in index.by_rid.values() if index.steady(t))
    cpu = cpu_over(samples, index.lo, index.hi) if samples else None
    out: dict[str, Any] = {
        "requests": {
            "tool_ok": summary.requests,
            "records": len(records),
            "matched": matched,
            "unmatched": unmatched,
            "not_ok": failed,  # failed, or cut at the tool's stop
            "server_arrived": len(index.by_rid),
            "steady_state": steady,
        },
        "truth": {k: round(v, 3) for k, v in tp.items()},
        "reported": {k: round(v, 3) for k, v in summary.pcts.items()},
        "reported_minus_truth": {k: round(summary.pcts[k] - tp[k], 3) for k in summary.pcts if k in tp},
        **_pcts(ttft_err, "added_ttft"),
        **_pcts(itl_err, "request_itl_abs_err"),
        **_pcts(chunk_err, "chunk_gap_abs_err_per_token"),
        "chunk_timings_kept": any(r.chunk_gaps_ms is not None for r in records),
        "parity": {
            "prompt_tokens_tool": tool_in if counted_in else None,
            "prompt_tokens_server": server_in if counted_in else None,
            "output_tokens_tool": tool_out if counted_out else None,
            "output_tokens_server": server_out if counted_out else None,
        },
        "throughput": {
            "requests_per_s": round(index.truth.requests_per_s, 1),
            "chunks_per_s": round(index.truth.chunks_per_s, 1),
            "window_s": round(index.hi - index.lo, 2),
        },
        "cpu": {
            "window_cpu_s": None if cpu is None else round(cpu, 3),
            "cpu_percent": None if cpu is None else round(100 * cpu / max(index.hi - index.lo, 1e-9), 1),
            "ms_per_request": None if cpu is None or not steady else round(1e3 * cpu / steady, 3),
        },
    }
    return out


def arrival_parity(index: TruthIndex, rate: float) -> dict[str, Any]:
    """The arrival sequence the server saw against a fixed rate: how regular, and how far from the schedule."""
    arrivals = sorted(t.arrival for t in index.by_rid.values() if t.arrival is not None and index.steady(t))
    if len(arrivals) < 3:
        return {"arrivals": len(arrivals)}
    gaps = [(b - a) * 1e3 for a, b in zip(arrivals, arrivals[1:], strict=False)]
    ideal = 1e3 / rate
    mean = statistics.fmean(gaps)
    # Each arrival against its slot on a grid at 1/rate anchored at the first: drift and jitter together.
    slot = [abs((t - arrivals[0]) * 1e3 - i * ideal) for i, t in enumerate(arrivals)]
    return {
        "arrivals": len(arrivals),
        "rate_asked": rate,
        "rate_seen": round(1e3 / mean, 2),
        "gap_ms_ideal": round(ideal, 3),
        "gap_cv": round(statistics.pstdev(gaps) / mean, 3),
        "gap_abs_err_ms_p50": round(quantile([abs(g - ideal) for g in gaps], 0.5), 3),
        "gap_abs_err_ms_p99": round(quantile([abs(g - ideal) for g in gaps], 0.99), 3),
        "off_schedule_ms_p99": round(quantile(slot, 0.99), 3),
    }
