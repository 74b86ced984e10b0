"""The latency fit (report/latency_fit.py) on requests of known costs, its bounded sample (measure/latency_samples.py),
and the split of TTFT by the server's request-time histograms (live/server_metrics.py, report/server_split.py)."""

from __future__ import annotations

import time
from array import array
from typing import Any

import numpy as np

from loadgen.live.server_metrics import ServerTimeline, parse_metrics
from loadgen.measure.latency_samples import FIELDS, LatencySamples
from loadgen.measure.records import RequestRecord, TokenSource
from loadgen.report.latency_fit import fit_table
from loadgen.report.server_split import latency_split
from loadgen.report.speculative import speculative_rows, tokens_per_chunk


def _table(n: int, ttft_us: np.ndarray, prompt: np.ndarray, dec: np.ndarray, e2e_us: np.ndarray, sent_ms: np.ndarray,
           cached: np.ndarray | None = None) -> dict[str, list[int]]:  # fmt: skip
    return {
        "ok": [1] * n,
        "prompt_tokens": prompt.tolist(),
        "prompt_from_usage": [1] * n,
        "cached_tokens": (cached if cached is not None else np.full(n, -1)).tolist(),
        "decode_tokens": dec.tolist(),
        "ttft_us": ttft_us.astype(int).tolist(),
        "span_us": [0] * n,
        "e2e_us": e2e_us.astype(int).tolist(),
        "sent_ms": sent_ms.astype(int).tolist(),
        "done_ms": (sent_ms + e2e_us / 1000).astype(int).tolist(),
    }


def test_fit_recovers_known_costs_with_intervals_that_hold_them() -> None:
    rng = np.random.default_rng(3)
    n = 1500
    prompt, cached = rng.integers(100, 4000, n), rng.integers(0, 80, n) * 16
    dec = rng.integers(10, 300, n)
    ttft = 4000 + 20 * (prompt - np.minimum(cached, prompt)) + 2 * np.minimum(cached, prompt) + rng.normal(0, 800, n)
    e2e = ttft + 12_000 * dec + rng.normal(0, 3000, n)
    fit = fit_table(_table(n, ttft, prompt, dec, e2e, np.arange(n) * 10_000.0, np.minimum(cached, prompt)), seed=1)
    assert fit is not None
    t = fit["ttft"]
    for key, truth in (("intercept_ms", 4.0), ("prefill_ms_per_token", 0.020), ("cached_ms_per_token", 0.002)):
        assert t[key]["ci_low"] <= truth <= t[key]["ci_high"], (key, t[key])
    assert t["ms_per_request_in_flight"] is None  # one request at a time: the load did not vary
    assert fit["queueing"]["dominated"] is None
    assert abs(t["residual_sd_ms"] - 0.8) < 0.1
    tpot = fit["e2e"]["tpot_ms"]
    assert tpot["ci_low"] <= 12.0 <= tpot["ci_high"] and abs(tpot["value"] - 12.0) < 0.01


def test_ttft_that_grows_with_the_requests_in_flight_is_called_queueing() -> None:
    rng = np.random.default_rng(5)
    n = 1200
    # Bursts: each burst's k-th request is sent while k − 1 are still running, and waits 30 ms behind each.
    burst = np.arange(n) % 12
    sent = (np.arange(n) // 12) * 5000.0 + burst
    prompt, dec = rng.integers(100, 2000, n), rng.integers(10, 50, n)
    ttft = 2000 + 20 * prompt + 30_000 * burst + rng.normal(0, 500, n)
    fit = fit_table(_table(n, ttft, prompt, dec, ttft + 10_000 * dec + 2_000_000, sent), seed=2)
    assert fit is not None
    q = fit["ttft"]["ms_per_request_in_flight"]
    assert q["ci_low"] <= 30.0 <= q["ci_high"], q
    assert fit["queueing"]["dominated"] is True and fit["queueing"]["load_share"] >= 0.5


def _record(i: int, variant: str = "a") -> RequestRecord:
    t0 = time.monotonic() - 500.0 + i  # completed 499.5 − i s ago: the sample places it by `done`
    rec = RequestRecord(f"w-{variant}-0-{i}", variant, "m", sent=t0, done=t0 + 0.5, prompt_tokens=100 + i)
    rec.chunk_times = array("d", [t0 + 0.05, t0 + 0.25, t0 + 0.45])
    rec.chunk_tokens = array("l", [1, 2, 2])
    rec.token_source = TokenSource.SERVER
    return rec


def test_samples_are_bounded_and_the_same_whatever_the_merge_order() -> None:
    one = LatencySamples(cap=50)
    for i in range(400):
        one.add(_record(i), 1000.0 + i)
    parts = [LatencySamples(cap=50) for _ in range(3)]
    for i in range(400):
        parts[i % 3].add(_record(i), 1000.0 + i)
    merged = LatencySamples(cap=50)
    for p in reversed(parts):
        merged.merge_wire(p.to_wire())
    assert 0 < len(one.variants["a"].keys) <= 50 and one.level > 0
    assert sorted(merged.variants["a"].keys) == sorted(one.variants["a"].keys)
    t = one.table("a")
    assert set(t) == set(FIELDS)
    k = t["prompt_tokens"].index(min(t["prompt_tokens"]))
    i = t["prompt_tokens"][k] - 100
    assert t["ttft_us"][k] == 50_000 and t["span_us"][k] == 400_000 and t["e2e_us"][k] == 500_000
    assert t["decode_tokens"][k] == 4  # the tokens after the first chunk
    # Placed by its own `done` (499.5 − i s ago), whatever the wall time it was added at.
    assert abs(t["done_ms"][k] - (time.time() - (499.5 - i)) * 1000) <= 2000
    assert t["done_ms"][k] - t["sent_ms"][k] == 500
    assert one.weight == 2**one.level


def _exposition(queue: tuple[float, int], prefill: tuple[float, int], ttft: tuple[float, int]) -> str:
    lines = ["vllm:num_requests_running 1"]
    for name, (total, count) in (
        ("vllm:request_queue_time_seconds", queue),
        ("vllm:request_prefill_time_seconds", prefill),
        ("vllm:time_to_first_token_seconds", ttft),
    ):
        lines += [f"# TYPE {name} histogram", f'{name}_bucket{{le="+Inf"}} {count}', f"{name}_sum {total}",
                  f"{name}_count {count}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def test_request_times_are_window_deltas_and_split_the_client_ttft() -> None:
    tl = ServerTimeline("http://x/metrics", 1.0)
    # Before the window: 10 requests that waited 1 s each (warm-up); in it, 20 more with 10 ms of queue each.
    for t, text in (
        (0.0, _exposition((0.0, 0), (0.0, 0), (0.0, 0))),
        (5.0, _exposition((10.0, 10), (0.5, 10), (10.5, 10))),
        (9.0, _exposition((10.2, 30), (1.1, 30), (11.3, 30))),
    ):
        kind, values = parse_metrics(text)
        tl.add(t, kind, values)
    times = tl.request_times(since_unix=5.5)
    assert times["queue"] == {"count": 20, "mean_ms": 10.0}
    assert times["prefill"] == {"count": 20, "mean_ms": 30.0}
    assert times["ttft"] == {"count": 20, "mean_ms": 40.0}
    assert tl.request_times()["queue"]["count"] == 30
    variant: dict[str, Any] = {"server_metrics": tl.report(5.5), "overall": {"metrics_ms": {"ttft": {"mean": 41.5}}}}
    split = latency_split(variant)
    assert split is not None
    assert split["network_client_ms"] == 1.5 and split["queue_ms"] == 10.0 and split["prefill_ms"] == 30.0
    assert split["queue_dominated"] is False and split["queue_share"] == round(10 / 41.5, 4)


def test_tokens_per_chunk_counts_every_chunk_after_the_first_and_merge() -> None:
    a, b = LatencySamples(), LatencySamples()
    for i, tokens in enumerate(([1, 4, 4, 2], [1, 1, 3], [1, 9])):
        rec = _record(i)
        rec.chunk_times = array("d", [rec.sent + 0.01 * (j + 1) for j in range(len(tokens))])
        rec.chunk_tokens = array("l", tokens)
        (a if i < 2 else b).add(rec, 1000.0)
    merged = LatencySamples()
    merged.merge_wire(a.to_wire())
    merged.merge_wire(b.to_wire())
    tpc = tokens_per_chunk(merged, "a")
    # After the first chunks: 4, 4, 2, 1, 3, 9 (9 goes in the "8 or more" bin).
    assert tpc == {"chunks": 6, "mean": round(23 / 6, 4), "empty": 0.0,
                   "shares": {"1": round(1 / 6, 4), "2": round(1 / 6, 4), "3": round(1 / 6, 4), "4": round(2 / 6, 4),
                              "8": round(1 / 6, 4)}}  # fmt: skip
    a.clear_rows()
    assert tokens_per_chunk(a, "a") is None
    server = {"summary": {"spec_acceptance": 0.5, "spec_tokens_per_step": 2.5}}
    variant = {"name": "a", "tokens_per_chunk": tpc, "speedup_vs_baseline": {"tpot_p50": 1.9}, "server_metrics": server}
    report = {"variants": [variant]}
    (row,) = speculative_rows(report)
    assert row[:5] == ["a", "6", "3.83", "2.50", "50.0 %"] and row[-1] == "1.90×" and "≥8: 16.7 %" in row[5]
