"""The report's formats: the canonical JSON matches its published schema (with the scenario and the machine it
ran on, never a secret), JUnit parses with a real consumer with one case per SLO plus run trust, CSV holds one row
per raw record, and `loadgen report` re-renders any of them with the report's own exit code."""

from __future__ import annotations

from array import array
from pathlib import Path

import orjson
import pytest
from junitparser import Failure, JUnitXml

from loadgen.cli import main
from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import RequestRecord
from loadgen.report import build_report
from loadgen.report.csv_records import COLUMNS, read_shards, render_csv
from loadgen.report.formats import formats
from loadgen.report.junit import render_junit
from loadgen.report.provenance import safe_url

from ..report_schema import checked, schema_errors

SCENARIO = """
name: fmt
seed: 5
variants:
  - {name: a, base_url: "http://127.0.0.1:1/proxy", model: m}
  - {name: b, base_url: "http://127.0.0.1:2", model: m}
slos:
  - {metric: ttft, stat: p50, max_ms: 60}
  - {metric: e2e, stat: p99, max_ms: 1000, variant: b}
  - {metric: success_rate, min_percent: 99}
"""


def _rec(i: int, variant: str, ttft: float, n: int = 8, error: str | None = None) -> RequestRecord:
    sent = 100.0 + i
    rec = RequestRecord(f"{variant}-{i}", variant, "chat", sent=sent, error=error)
    times = array("d", [] if error else [sent + ttft + 0.01 * k for k in range(n)])
    rec.chunk_times = times
    rec.chunk_tokens = array("l", [1] * len(times))
    rec.done = times[-1] if len(times) else sent + 1.0
    rec.output_tokens = len(times)
    rec.bucket = "short"
    return rec


def _report(fast_a: bool = True, trust_reasons: list[str] | None = None) -> dict:
    agg = Aggregate()
    for i in range(20):
        agg.add(_rec(i, "a", 0.03 if fast_a else 0.2), 0.0)
        agg.add(_rec(i, "b", 0.04), 0.0)
    run = {"workers": {"worker-0": {}}, "untrustworthy_reasons": list(trust_reasons or [])}
    return build_report(parse_scenario(SCENARIO), agg, 10.0, run)


def test_reports_match_the_published_schema_and_carry_scenario_and_machine_without_secrets() -> None:
    for report in (_report(), _report(fast_a=False), _report(trust_reasons=["worker worker-0: loop lag"])):
        checked(report)
    report = _report()
    doc = report["scenario_doc"]
    assert doc["seed"] == 5 and [v["name"] for v in doc["variants"]] == ["a", "b"]
    assert doc["variants"][0]["base_url"] == "http://127.0.0.1:1/proxy"
    # The scenario refuses credentials in a URL; what reaches a report is stripped of them all the same.
    assert safe_url("http://user:pw@host:8000/v1?token=abc#x") == "http://host:8000/v1"
    env = report["environment"]
    assert env["python"] and env["cpu_model"] and env["cores"] and env["locust"]
    assert report["run"]["worker_count"] == 1 and report["seed"] == 5
    # The schema can fail: a report missing its verdict, or leaking a credential in a URL, does not validate.
    broken = {k: v for k, v in report.items() if k != "exit_code"}
    assert any("exit_code" in e for e in schema_errors(broken))
    leaky = orjson.loads(orjson.dumps(report))
    leaky["variants"][0]["base_url"] = "http://u:p@host/"
    assert schema_errors(leaky)


def test_junit_has_one_case_per_slo_and_one_for_trust_with_measured_vs_threshold(tmp_path: Path) -> None:
    report = _report(fast_a=False, trust_reasons=["worker worker-0: event-loop lag p99 40.0 ms > 20 ms"])
    path = tmp_path / "junit.xml"
    path.write_text(render_junit(report), encoding="utf-8")
    suites = JUnitXml.fromfile(str(path))
    cases = [case for suite in suites for case in suite]
    # SLOs: ttft for a and b, e2e for b only, success rate for a and b; plus run trust.
    assert len(cases) == len(report["slos"]) + 1 == 6
    failed = {case.name: case for case in cases if any(isinstance(r, Failure) for r in case.result)}
    assert set(failed) == {"a: ttft p50 ≤ 60 ms", "run trust"}
    (ttft_failure,) = failed["a: ttft p50 ≤ 60 ms"].result
    assert "ttft p50 200" in ttft_failure.message and "threshold ≤ 60 ms" in ttft_failure.message
    (trust_failure,) = failed["run trust"].result
    assert "worker worker-0: event-loop lag p99 40.0 ms > 20 ms" in trust_failure.message
    clean = tmp_path / "clean.xml"
    clean.write_text(render_junit(_report()), encoding="utf-8")
    assert all(not case.result for suite in JUnitXml.fromfile(str(clean)) for case in suite)


def _shards(tmp_path: Path, n: int = 5) -> Path:
    raw = tmp_path / "raw"
    raw.mkdir()
    given_up = _rec(98, "b", 0.05, n=3)
    given_up.cancelled = "tokens"
    rows = [_rec(i, "a", 0.05).to_json() for i in range(n)] + [given_up.to_json()]
    rows.append(_rec(99, "b", 0.0, error="timeout").to_json())
    (raw / "records-r1-w0-1.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return raw


def test_csv_has_one_row_per_record_with_timings_in_ms(tmp_path: Path) -> None:
    rows = read_shards(_shards(tmp_path))
    lines = render_csv(rows).splitlines()
    assert lines[0].split(",") == list(COLUMNS) and len(lines) == 1 + 7
    first = dict(zip(COLUMNS, lines[1].split(","), strict=True))
    assert first["id"] == "a-0" and first["ttft_ms"] == "50.0" and first["chunks"] == "8"
    assert first["cancelled"] == "" and first["error"] == ""
    given_up = next(dict(zip(COLUMNS, line.split(","), strict=True)) for line in lines if line.startswith("b-98"))
    assert given_up["cancelled"] == "tokens" and given_up["error"] == "" and given_up["chunks"] == "3"
    # How each ended, from the shard's own fields where an older shard did not name it.
    fates = {line.split(",")[0]: dict(zip(COLUMNS, line.split(","), strict=True))["fate"] for line in lines[1:]}
    assert fates["a-0"] == "succeeded" and fates["b-98"] == "cancelled_by_tokens" and fates["b-99"] == "timed_out"
    failed = next(dict(zip(COLUMNS, line.split(","), strict=True)) for line in lines if line.startswith("b-99"))
    assert failed["error"] == "timeout" and failed["ttft_ms"] == ""


def test_report_command_renders_every_format_and_exits_with_the_reports_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "report.json"
    report = _report(fast_a=False)  # a breaches its TTFT SLO: exit 1
    path.write_bytes(orjson.dumps(report))
    for name in formats().names():
        if name in ("csv", "html"):
            continue  # csv needs shards; html is tested with its writer
        assert main(["report", str(path), "--format", name]) == 1, name
        assert capsys.readouterr().out
    assert main(["report", str(tmp_path), "--format", "junit", "--exit-zero", "--out", str(tmp_path / "j.xml")]) == 0
    assert "SLO breached" in (tmp_path / "j.xml").read_text()
    assert main(["report", str(path), "--format", "json"]) == 1
    assert orjson.loads(capsys.readouterr().out) == orjson.loads(orjson.dumps(report))


def test_report_command_refuses_bad_input_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "other.json").write_text('{"hello": 1}')
    assert main(["report", str(tmp_path / "other.json")]) == 2
    assert "not a loadgen report" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.json")]) == 2
    assert "missing.json: cannot read it" in capsys.readouterr().err
    (tmp_path / "cut.json").write_bytes(b'{\n  "schema": "loadgen.report/v1",\n  "scena')  # a report, truncated
    assert main(["report", str(tmp_path / "cut.json")]) == 4
    assert "cut.json: a loadgen report that is not whole JSON" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["report", str(empty), "--format", "csv"]) == 2
    assert "no records-*.jsonl shards" in capsys.readouterr().err
    raw = _shards(tmp_path)
    assert main(["report", str(raw), "--format", "md"]) == 2
    assert "needs --scenario" in capsys.readouterr().err
    (raw / "records-r1-w1-2.jsonl").write_text('{"id": "x"}\nnot json\n')
    assert main(["report", str(raw), "--format", "csv"]) == 2
    assert "records-r1-w1-2.jsonl:2: not a JSON record" in capsys.readouterr().err


def test_a_report_rebuilt_from_shards_has_the_live_latencies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = _shards(tmp_path, n=12)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    assert main(["report", str(raw), "--format", "json", "--scenario", str(scenario), "--exit-zero"]) == 0
    rebuilt = checked(orjson.loads(capsys.readouterr().out))
    agg = Aggregate()
    for row in read_shards(raw):
        agg.add(RequestRecord.from_json(row), 0.0)
    live = build_report(parse_scenario(SCENARIO), agg, 10.0)
    for i, v in enumerate(rebuilt["variants"]):
        assert v["overall"]["metrics_ms"] == live["variants"][i]["overall"]["metrics_ms"]
        assert v["overall"]["errors"] == live["variants"][i]["overall"]["errors"]
        assert v["overall"]["cancelled"] == live["variants"][i]["overall"]["cancelled"] == (v["name"] == "b")
    assert rebuilt["run"]["rebuilt_from_records"]["rows"] == 14
    assert main(["report", str(raw), "--format", "csv"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 15


def test_a_sweep_has_its_own_self_contained_page() -> None:
    from loadgen.report.html import render_sweep_html

    step = {"requested_rate_per_s": 10, "achieved_rate_per_s": 9.9, "passed": True}
    step |= {"ttft_p50_ms": 10, "ttft_p99_ms": 20, "e2e_p50_ms": 100, "e2e_p99_ms": 200, "itl_p50_ms": 5}
    doc = {"scenario": "s<x>", "plan": {"by": "rate"}, "step_duration_s": 3, "exit_code": 0}
    doc["variants"] = [{"name": "a", "knee_rate_per_s": 10, "steps": [step]}, {"name": "b", "knee_rate_per_s": None}]
    page = render_sweep_html(doc)
    assert "<script src=" not in page and "s&lt;x&gt;" in page
    assert "<td>a</td><td>10 req/s</td>" in page and "<td>b</td><td>none passed</td>" in page
    assert '"sweep-ttft"' in page and '"sweep-e2e"' in page  # the curves' charts, with their points embedded
