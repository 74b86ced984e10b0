"""A crash is never a verdict: the exit code of a run that failed (4, or 128 + N for a master killed by signal N),
what the launcher makes of the master's exit and its report (report/failed_run.py), and how every format shows a
failed run and the exceptions Locust caught in users."""

from __future__ import annotations

import os
import signal
import time
from array import array
from pathlib import Path

import orjson
from junitparser import Error, JUnitXml

from loadgen.config.scenario import parse_scenario
from loadgen.exit_codes import ExitCode, from_returncode, signal_death
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import RequestRecord
from loadgen.report import build_report
from loadgen.report.build import write_reports
from loadgen.report.failed_run import mark_failed, settle_run
from loadgen.report.html import render_html
from loadgen.report.junit import render_junit
from loadgen.report.markdown import render_markdown

from ..report_schema import checked

SCENARIO = """
name: crash
seed: 3
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m}
slos:
  - {metric: ttft, stat: p50, max_ms: 1000}
"""


def _rec(i: int) -> RequestRecord:
    rec = RequestRecord(f"r1-w0-1-a-{i}", "a", "chat", sent=100.0 + i)
    rec.chunk_times = array("d", [100.0 + i + 0.05 + 0.01 * k for k in range(4)])
    rec.chunk_tokens = array("l", [1] * 4)
    rec.done = rec.chunk_times[-1]
    rec.output_tokens = 4
    return rec


def _report(run: dict | None = None) -> dict:
    agg = Aggregate()
    for i in range(10):
        agg.add(_rec(i), 0.0)
    return build_report(parse_scenario(SCENARIO), agg, 10.0, {"workers": {}, **(run or {})})


def test_a_failed_run_has_its_own_code_and_a_signal_death_is_128_plus_n() -> None:
    assert int(ExitCode.RUN_FAILED) == 4 and len({int(c) for c in ExitCode}) == 5
    assert from_returncode(-9) == 137 and from_returncode(-15) == 143  # not 247 (sys.exit(-9))
    assert from_returncode(3) == 3
    assert signal_death(-9) == "signal 9 (SIGKILL)" and signal_death(137) == "signal 9 (SIGKILL)"
    assert signal_death(1) is None and signal_death(4) is None


def test_a_failed_report_exits_4_over_any_verdict_and_every_format_says_so() -> None:
    ok = _report()
    assert ok["exit_code"] == 0
    report = checked(mark_failed(_report(), "worker-1: unhandled exception in a greenlet: ValueError: boom"))
    assert report["exit_code"] == ExitCode.RUN_FAILED
    md = render_markdown(report)
    assert "**FAILED**" in md and "Run failed** (exit 4)" in md and "ValueError: boom" in md
    html = render_html(report)
    assert "Exit code 4: the run failed: no verdict" in html and "ValueError: boom" in html
    suites = JUnitXml.fromstring(render_junit(report))
    (case,) = [c for suite in suites for c in suite if c.name == "run trust"]
    (err,) = case.result
    assert isinstance(err, Error) and "ValueError: boom" in (err.message or "")
    untrusted = checked(mark_failed(_report({"untrustworthy_reasons": ["worker-0: loop lag"]}), "cut short"))
    assert untrusted["exit_code"] == 4 and "Not trustworthy:" in render_markdown(untrusted)


def test_user_exceptions_are_named_in_json_and_markdown() -> None:
    exc = [{"message": "KeyError: 'choices'", "count": 7, "nodes": ["worker-0"], "where": "user.py:9 in stream"}]
    reason = (
        "Locust users raised 7 exceptions (KeyError: 'choices' ×7): those requests did not run as the scenario says"
    )
    report = checked(_report({"user_exceptions": exc, "untrustworthy_reasons": [reason]}))
    assert report["exit_code"] == ExitCode.UNTRUSTWORTHY
    assert report["run"]["user_exceptions"] == exc
    md = render_markdown(report)
    assert "exception in users ×7 (worker-0) at user.py:9 in stream: KeyError: 'choices'" in md
    assert reason in md


def test_a_master_that_wrote_its_report_and_exited_with_its_code_is_the_run(tmp_path: Path) -> None:
    report = _report()
    write_reports(report, tmp_path)
    assert settle_run(0, tmp_path) == (0, None)
    assert orjson.loads((tmp_path / "report.json").read_bytes())["exit_code"] == 0


def test_a_master_that_wrote_no_report_failed_unless_it_refused_its_configuration(tmp_path: Path) -> None:
    # A traceback (Python exits 1), Locust's own exits, even 0: no report is no verdict — never 1, "SLO breached".
    for code in (0, 1, 3, 255):
        settled, why = settle_run(code, tmp_path)
        assert settled == ExitCode.RUN_FAILED and why is not None and f"exited {code}" in why
    assert settle_run(2, tmp_path) == (2, None)  # refused before any load: bad configuration
    assert not (tmp_path / "report.json").exists()  # nothing to rebuild it from


def test_a_master_killed_by_a_signal_exits_128_plus_n_and_its_report_is_rebuilt_from_the_shards(
    tmp_path: Path,
) -> None:
    raw = tmp_path / "raw"
    raw.mkdir()
    old = raw / "records-r1-w0-1.jsonl"  # an earlier run's shard in the same folder: not this run's
    old.write_bytes(orjson.dumps(_rec(99).to_json()) + b"\n")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    since = time.time() - 1
    rows = b"".join(orjson.dumps(_rec(i).to_json()) + b"\n" for i in range(12))
    (raw / "records-r1-w0-2.jsonl").write_bytes(rows + b'{"id": "cut by the kil')
    out = tmp_path / "report"
    out.mkdir()
    settled, why = settle_run(-signal.SIGKILL, out, parse_scenario(SCENARIO), raw, since)
    assert settled == 137 and why is not None and "SIGKILL" in why
    report = checked(orjson.loads((out / "report.json").read_bytes()))
    assert report["exit_code"] == ExitCode.RUN_FAILED
    assert report["run"]["rebuilt_from_records"]["rows"] == 12
    (failed,) = report["run"]["failed"]
    assert "killed by signal 9 (SIGKILL)" in failed and "12 raw records" in failed
    assert "FAILED" in (out / "report.md").read_text(encoding="utf-8")


def test_a_master_whose_exit_disagrees_with_its_report_crashed_after_writing_it(tmp_path: Path) -> None:
    write_reports(_report(), tmp_path)  # says 0
    settled, why = settle_run(1, tmp_path)  # a traceback after the report
    assert settled == ExitCode.RUN_FAILED and why is not None
    report = checked(orjson.loads((tmp_path / "report.json").read_bytes()))
    assert report["exit_code"] == 4 and "crashed" in report["run"]["failed"][0]
    write_reports(_report(), tmp_path)
    settled, why = settle_run(-signal.SIGTERM, tmp_path)
    assert settled == 143 and "SIGTERM" in str(why)
    assert orjson.loads((tmp_path / "report.json").read_bytes())["exit_code"] == 4


def test_a_sweep_step_whose_run_failed_is_no_pass_and_the_sweep_failed() -> None:
    from loadgen.report.sweep import step_row, sweep_json

    crashed = mark_failed(_report(), "worker-0: unhandled exception in a greenlet: ValueError: boom")
    row = step_row(2, crashed, "a/1/report.json", 4)
    assert not row["passed"] and not row["trustworthy"] and "ValueError: boom" in row["untrustworthy_reasons"][0]
    assert sweep_json("s", {"kind": "rates", "spec": "2"}, 3.0, {"a": [row]})["exit_code"] == 4
    killed = step_row(2, None, "a/1/report.json", 137)  # its master was SIGKILLed and wrote nothing
    assert sweep_json("s", {"kind": "rates", "spec": "2"}, 3.0, {"a": [killed]})["exit_code"] == 4
