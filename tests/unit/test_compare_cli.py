"""`loadgen compare BASE NEW` (cli/compare.py, report/compare_gate.py): verdicts and exit codes on reports whose data is
known — an identical rerun passes, a slower one is a regression, a change inside the threshold or inside noise is
not, a lost variant is, an untrustworthy run gets 3, a failed run or a report that cannot be read whole 4, and bad
input 2 naming the file."""

from __future__ import annotations

import os
from array import array
from pathlib import Path

import numpy as np
import orjson
import pytest

from loadgen.cli import main
from loadgen.cli.compare import parse_percent
from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import RequestRecord
from loadgen.report import build_report
from loadgen.report.compare_gate import compare_reports, render_compare

SCENARIO = """
seed: 5
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m}
  - {name: b, base_url: "http://127.0.0.1:2", model: m}
"""


def _report(seed: int, slow_b: float = 1.0, rate_b: float = 1.0, n: int = 1200) -> dict:
    """Two variants, n requests each completing evenly over 30 s (b's at rate_b of a's), lognormal TTFT and gaps;
    b's latencies x slow_b."""
    g = np.random.default_rng(seed)
    agg = Aggregate()
    for v, f, rate in (("a", 1.0, 1.0), ("b", slow_b, rate_b)):
        count = int(n * rate)
        for i in range(count):
            ttft, gap = g.lognormal(-3, 0.4) * f, g.lognormal(-4, 0.3) * f
            times = array("d", [100.0 + ttft + gap * k for k in range(10)])
            rec = RequestRecord(f"r1-w0-1-{v}-3-{i}", v, "chat", sent=100.0, chunk_times=times)
            rec.chunk_tokens = array("l", [1] * 10)
            rec.done = times[-1]
            rec.output_tokens = 10
            agg.add(rec, 1_000_000.0 + 30.0 * i / count)
    return build_report(parse_scenario(SCENARIO), agg, 30.0)


def _write(tmp: Path, name: str, report: dict) -> str:
    path = tmp / name
    path.write_bytes(orjson.dumps(report))
    return str(path)


@pytest.fixture(scope="module")
def base() -> dict:
    return _report(1)


def test_an_identical_rerun_passes_and_a_slower_variant_is_a_regression(
    base: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    b = _write(tmp_path, "base.json", base)
    assert main(["compare", b, _write(tmp_path, "rerun.json", _report(2)), "--json", str(tmp_path / "r.json")]) == 0
    out = capsys.readouterr().out
    assert "| a | TPOT p50 (ms) |" in out and "0 regressions · exit code 0" in out
    rerun = orjson.loads((tmp_path / "r.json").read_bytes())
    assert all(not r["regression"] and abs(r["change"]) < 0.05 for r in rerun["rows"])
    # The same report against itself: no change, and every interval holds it.
    itself = compare_reports(base, base, 0.05)
    assert all(r["ratio"] == 1.0 and r["within_noise"] for r in itself["rows"]) and itself["exit_code"] == 0
    slow = _write(tmp_path, "slow.json", _report(3, slow_b=1.2, rate_b=0.8))
    assert main(["compare", b, slow, "--max-regression", "5%", "--json", str(tmp_path / "s.json")]) == 1
    out = capsys.readouterr().out
    rows = {(r["variant"], r["metric"]): r for r in orjson.loads((tmp_path / "s.json").read_bytes())["rows"]}
    tpot = rows[("b", "tpot_p50")]
    assert tpot["regression"] and abs(tpot["ratio"] - 1.2) < 0.03 and tpot["ci_low"] > 1.1
    assert "**regression**" in out and "| b | TPOT p50 (ms) |" in out
    # b completed 20 % fewer requests over the same 30 s: its throughput interval comes from the timeline's bins.
    rps = rows[("b", "requests_per_s")]
    assert abs(rps["ratio"] - 0.8) < 0.01 and rps["ci_high"] < 1.0 and rps["regression"]
    assert not any(r["regression"] for (v, _), r in rows.items() if v == "a")


def test_a_change_inside_the_threshold_or_inside_noise_is_no_regression(base: dict) -> None:
    slower = _report(3, slow_b=1.2)
    wide = compare_reports(base, slower, max_regression=0.5)
    assert wide["exit_code"] == 0 and wide["regressions"] == 0
    assert {r["verdict"] for r in wide["rows"] if r["variant"] == "b" and r["metric"] == "tpot_p50"} == {
        "within threshold"
    }
    # The same 60 requests 3 % slower: beyond a 1 % threshold, but 60 requests cannot tell it from noise.
    few = compare_reports(_report(1, n=60), _report(1, slow_b=1.03, n=60), max_regression=0.01)
    row = next(r for r in few["rows"] if r["variant"] == "b" and r["metric"] == "ttft_p50")
    assert row["ratio"] == pytest.approx(1.03, abs=0.002)
    assert row["within_noise"] is True and row["verdict"] == "within noise" and not row["regression"]
    assert few["exit_code"] == 0


def test_a_variant_lost_in_new_is_a_regression_and_a_new_one_is_listed(base: dict) -> None:
    new = orjson.loads(orjson.dumps(base))
    new["variants"][1]["name"] = "c"
    result = compare_reports(base, new, 0.05)
    assert result["exit_code"] == 1
    verdicts = {(r["variant"], r["verdict"]) for r in result["rows"] if r["metric"] == "*"}
    assert verdicts == {("b", "missing in NEW"), ("c", "new in NEW")}
    # A metric BASE measured and NEW did not (no successful request) is one too.
    del new["variants"][0]["overall"]["metrics_ms"]["tpot"]
    row = next(r for r in compare_reports(base, new, 0.05)["rows"] if r["metric"] == "tpot_p50")
    assert row["regression"] and row["verdict"].startswith("missing in NEW")


def test_an_untrustworthy_run_exits_3(base: dict) -> None:
    new = orjson.loads(orjson.dumps(base))
    new["run"]["untrustworthy_reasons"] = ["worker-0: event-loop lag p99 180 ms"]
    result = compare_reports(base, new, 0.05)
    assert result["exit_code"] == 3 and result["untrustworthy"] == ["NEW: worker-0: event-loop lag p99 180 ms"]


def test_a_failed_run_gives_no_verdict_exit_4(base: dict) -> None:
    new = orjson.loads(orjson.dumps(base))
    new["run"]["failed"] = ["the master exited 1 without writing a report"]
    new["run"]["untrustworthy_reasons"] = ["worker-0: event-loop lag p99 180 ms"]  # 4 over 3: no verdict at all
    result = compare_reports(base, new, 0.05)
    assert result["exit_code"] == 4 and result["failed"] == ["NEW: the master exited 1 without writing a report"]
    assert "run failed, no verdict — NEW: the master exited 1" in render_compare(result, "b.json", "n.json")


def test_bad_input_exits_2_naming_the_file(base: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Usage (2): what was given is not a loadgen report of this version — the command line is what to fix."""
    good = _write(tmp_path, "good.json", base)
    (tmp_path / "folder.json").mkdir()
    cases = {
        "missing.json": None,
        "folder.json": None,
        "junk.json": b"{not json",
        "scenario.yaml": b"variants: []\n",
        "other.json": orjson.dumps({"schema": "other/v9"}),
        "older.json": orjson.dumps({**base, "schema": "loadgen.report/v0"}),
    }
    for name, content in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        assert main(["compare", good, str(path)]) == 2, name
        assert str(path) in capsys.readouterr().err


def test_a_report_that_cannot_be_read_whole_exits_4(
    base: dict, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No verdict (4): a loadgen report, given correctly, that is truncated, lacks its sections, or cannot be read."""
    good = _write(tmp_path, "good.json", base)
    whole = orjson.dumps(base, option=orjson.OPT_INDENT_2)
    cases = {
        "truncated.json": whole[: len(whole) // 2],
        "cut.json": orjson.dumps({**base, "variants": [{"name": "a"}]}),
        "unreadable.json": whole,
    }
    for name, content in cases.items():
        path = tmp_path / name
        path.write_bytes(content)
        if name == "unreadable.json":
            path.chmod(0)
            if os.access(path, os.R_OK):  # root reads anything: no unreadable file to be had
                continue
        assert main(["compare", good, str(path)]) == 4, name
        assert str(path) in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["compare", good, good, "--max-regression", "lots"])
    assert exc.value.code == 2


def test_thresholds_read_as_percent() -> None:
    assert parse_percent("5%") == pytest.approx(0.05) and parse_percent(" 12.5 ") == pytest.approx(0.125)
