"""The headless status line: what it says, and how it is written to a terminal (redrawn in place) or a log."""

from __future__ import annotations

from loadgen.live.progress import BAR_WIDTH, final_newline, progress_line, render


def _variant(name: str, rps: float | None, p50: float | None, p99: float | None, errors: dict[str, int]) -> dict:
    ttft = {"count": 10, "p50": p50, "p99": p99} if p50 is not None else None
    metrics = {"ttft": ttft} if ttft else {}
    return {"name": name, "overall": {"requests_per_s": rps, "errors": errors, "metrics_ms": metrics}}


SUMMARY = {
    "variants": [
        _variant("baseline", 30.5, 23.25, 412.0, {"timeout": 2}),
        _variant("int8", 12.0, 9.0, 15.75, {"http_5xx": 1, "timeout": 3}),
    ],
    "run": {"untrustworthy_reasons": [], "lost_workers": []},
}


def test_the_line_says_elapsed_users_rates_ttft_errors_and_trust() -> None:
    line = progress_line(SUMMARY, 75.4, 120.0, 48)
    assert line == (
        "1m15s/2m00s | users 48 | 42.5 req/s | baseline TTFT p50 23.2 p99 412 ms | int8 TTFT p50 9.0 p99 15.8 ms"
        " | errors 6 (timeout 5, http_5xx 1) | trust ok"
    )


def test_before_any_data_and_when_untrustworthy() -> None:
    empty = {"variants": [_variant("a", None, None, None, {})], "run": {"untrustworthy_reasons": ["x"]}}
    line = progress_line(empty, 2.0, None, None)
    assert line == "2s | users — | 0.0 req/s | a TTFT p50 — p99 — ms | errors 0 | NOT TRUSTWORTHY (1 reason)"
    bad = {**empty, "run": {"untrustworthy_reasons": ["x"], "lost_workers": ["worker-1"]}}
    assert progress_line(bad, 2.0, None, None).endswith("NOT TRUSTWORTHY (2 reasons)")
    crashed = {**empty, "run": {"untrustworthy_reasons": [], "failed": ["worker-0: unhandled exception …"]}}
    assert progress_line(crashed, 2.0, None, None).endswith("errors 0 | RUN FAILED (1 crash) | trust ok")


def test_a_log_gets_plain_lines() -> None:
    out = render("12s/60s | users 4", 12, 60, tty=False)
    assert out == "loadgen: 12s/60s | users 4\n"
    assert "\r" not in out and "\x1b" not in out
    assert final_newline(False) == ""


def test_a_terminal_gets_one_line_redrawn_with_a_bar_cut_to_its_width() -> None:
    out = render("12s/60s | users 4", 15, 60, tty=True, columns=200)
    assert out.startswith("\r[") and out.endswith("\x1b[K") and "\n" not in out
    bar = out[2 : 2 + BAR_WIDTH]
    assert bar == "#" * 5 + "-" * 15  # a quarter of the run
    assert " 25% 12s/60s | users 4" in out
    narrow = render("x" * 300, 60, 60, tty=True, columns=50)
    assert len(narrow.removeprefix("\r").removesuffix("\x1b[K")) == 49 and narrow.startswith("\r[" + "#" * BAR_WIDTH)
    # Past the planned end (a slow stop), the bar stays full; with no known total there is no bar.
    assert render("t", 90, 60, tty=True).startswith("\r[" + "#" * BAR_WIDTH + "] 100% ")
    assert render("t", 5, None, tty=True) == "\rt\x1b[K"
    assert final_newline(True) == "\n"
