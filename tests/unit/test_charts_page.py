"""The web UI's charts page: what it polls leaves the bins still filling out while the run goes on, so a steady
tokens/s does not seem to drop at the right edge, and draws p50 / p99 per bin.

The ground truth: a steady 10 tokens/s for 5 whole seconds, then the second the run is in, half filled (5 tokens
so far). Drawn, that last bin would read as a halving of throughput.
"""

from __future__ import annotations

from typing import Any

from loadgen.live.charts_page import charts_data, render_charts_page, settled_bins
from loadgen.measure.records import RequestRecord, TokenSource
from loadgen.measure.timeline import Timeline

T0 = 1_700_000_000


def _summary(finished: bool = False, e2e_p99_ms: float | None = None) -> dict[str, Any]:
    tl = Timeline()
    for sec in range(6):
        for k in range(10 if sec < 5 else 5):  # one-token requests, 0.1 s apart; second 5 half done
            t = sec + k / 10
            rec = RequestRecord(f"r{sec}-{k}", "a", "chat", sent=t, done=t + 0.05)
            rec.chunk_times, rec.chunk_tokens = [t + 0.02], [1]
            rec.output_tokens, rec.token_source = 1, TokenSource.SERVER
            tl.add(rec, T0 + t + 0.05, float("-inf"))
    overall = {"requests": 55, "metrics_ms": {"e2e": {"count": 55, "p50": 50.0, "p99": e2e_p99_ms}}}
    return {
        "run": {"run_number": 1, "finished": finished, "window_s": 5.5},
        "variants": [{"name": "a", "overall": overall, "timeline": tl.report("a")}],
    }


def test_the_still_filling_bin_is_left_out_and_throughput_does_not_seem_to_drop() -> None:
    summary = _summary()
    assert summary["variants"][0]["timeline"]["output_tokens_per_s"] == [10, 10, 10, 10, 10, 5]  # what it holds
    data = charts_data(summary, now_unix_s=T0 + 5.6)  # a local run: no report lag; E2E p99 unknown
    tl = data["variants"][0]["timeline"]
    assert tl["output_tokens_per_s"] == [10, 10, 10, 10, 10]  # second 5 is not over: left out
    assert data["variants"][0]["still_filling_bins"] == 1
    # Every column is cut alike (the x of point i is start + i·bin_s for each).
    assert {len(v) for v in tl.values() if isinstance(v, list)} == {5}
    assert tl["start_unix_s"] == T0 and tl["bin_s"] == 1


def test_bins_settle_after_the_report_lag_and_the_e2e_tail() -> None:
    # A master (workers report every 3 s) and requests up to 1.5 s long: a bin settles 4.5 s after its end.
    data = charts_data(_summary(e2e_p99_ms=1500.0), now_unix_s=T0 + 6.0, report_lag_s=3.0)
    assert data["variants"][0]["timeline"]["output_tokens_per_s"] == [10]  # only [T0, T0+1) ended by 1.5 s
    assert data["variants"][0]["still_filling_bins"] == 5
    assert settled_bins({"start_unix_s": T0, "bin_s": 2, "ok": [0] * 10}, T0 + 9.9, 3.0) == 3  # coarser bins
    assert settled_bins({"start_unix_s": None, "ok": []}, T0, 0.0) == 0


def test_after_the_stop_every_bin_is_drawn() -> None:
    data = charts_data(_summary(finished=True), now_unix_s=T0 + 5.6, report_lag_s=3.0)
    assert data["variants"][0]["timeline"]["output_tokens_per_s"] == [10, 10, 10, 10, 10, 5]
    assert data["variants"][0]["still_filling_bins"] == 0


def test_the_page_draws_p50_and_p99_per_bin() -> None:
    data = charts_data(_summary(), now_unix_s=T0 + 5.6)
    tl = data["variants"][0]["timeline"]
    # Every request took 20 ms to its first token: each whole bin's p50 and p99 say so (within 1 %).
    assert all(abs(v - 20) <= 0.2 for v in tl["ttft_p50_ms"] + tl["ttft_p99_ms"]), tl
    page = render_charts_page("s")
    assert all(f'"{c}"' in page for c in ("ttft_p50_ms", "ttft_p99_ms", "e2e_p50_ms", "e2e_p99_ms"))
    assert "mean" not in page
