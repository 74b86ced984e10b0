"""`loadgen trend`: a line per variant and metric over a series of reports, in generated_at order; bad input: 2."""

from __future__ import annotations

import json
import re
from array import array
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.cli import main
from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import RequestRecord
from loadgen.report.build import build_report

SCENARIO = """
name: nightly
variants:
  - {name: base, base_url: "http://127.0.0.1:1", model: m, baseline: true}
  - {name: int8, base_url: "http://127.0.0.1:2", model: m}
"""


def _report(night: int) -> dict[str, Any]:
    """Night n: TTFT 50 + 10 n ms on base, half that on int8; generated at 02:00 on day n + 1."""
    agg = Aggregate()
    for i in range(50):
        for variant, scale in (("base", 1.0), ("int8", 0.5)):
            ttft = scale * (0.05 + 0.01 * night)
            times = array("d", [i + ttft + 0.02 * k for k in range(10)])
            rec = RequestRecord(f"{variant}-{i}", variant, "chat", sent=float(i), chunk_times=times)
            rec.chunk_tokens = array("l", [1] * 10)
            rec.done, rec.output_tokens, rec.prompt_tokens = times[-1], 10, 30
            agg.add(rec, 1_700_000_000.0 + i)
    report = build_report(parse_scenario(SCENARIO), agg, 50.0)
    report["generated_at"] = f"2026-11-{night + 1:02d}T02:00:00+00:00"
    return report


def _write(tmp_path: Path, name: str, doc: Any) -> str:
    path = tmp_path / name
    path.write_bytes(orjson.dumps(doc))
    return str(path)


def _charts(page: str) -> dict[str, dict[str, Any]]:
    block = re.search(r'<script type="application/json" id="loadgen-data">(.*?)</script>', page, re.S)
    assert block is not None
    return {c["id"]: c for c in json.loads(block.group(1))["charts"]}


def test_five_reports_draw_one_line_per_variant_and_metric_in_time_order(tmp_path: Path) -> None:
    reports = {n: _report(n) for n in range(5)}
    # Given out of order (file names sort differently from the nights): the page is in generated_at order.
    files = [_write(tmp_path, f"r{(7 * n) % 5}.json", reports[n]) for n in (3, 0, 4, 1, 2)]
    out = tmp_path / "trend.html"
    assert main(["trend", *files, "--out", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    charts = _charts(page)
    assert sorted(charts) == ["trend-e2e", "trend-itl", "trend-throughput", "trend-tpot", "trend-ttft"]
    for key, c in charts.items():
        assert c["config"]["data"]["labels"] == [f"2026-11-{n + 1:02d} 02:00" for n in range(5)]
        datasets = c["config"]["data"]["datasets"]
        expected = ["base", "int8"] if key == "trend-throughput" else ["base p50", "base p99", "int8 p50", "int8 p99"]
        assert [ds["label"] for ds in datasets] == expected
        assert all(len(ds["data"]) == 5 and None not in ds["data"] for ds in datasets)
    ttft = {ds["label"]: ds["data"] for ds in charts["trend-ttft"]["config"]["data"]["datasets"]}
    for n in range(5):
        base = reports[n]["variants"][0]["overall"]["metrics_ms"]["ttft"]
        assert ttft["base p50"][n] == base["p50"] and ttft["base p99"][n] == base["p99"]
    assert ttft["base p50"] == sorted(ttft["base p50"]) and ttft["base p50"][0] < ttft["base p50"][-1]
    assert ttft["int8 p50"][4] == pytest.approx(ttft["base p50"][4] / 2, rel=0.01)
    assert '<canvas id="trend-ttft"' in page and "<script src" not in page


def test_a_variant_missing_from_a_report_is_a_gap(tmp_path: Path) -> None:
    first, second = _report(0), _report(1)
    second["variants"] = second["variants"][:1]
    out = tmp_path / "t.html"
    files = [_write(tmp_path, "a.json", first), _write(tmp_path, "b.json", second)]
    assert main(["trend", *files, "--out", str(out)]) == 0
    ds = {d["label"]: d["data"] for d in _charts(out.read_text())["trend-e2e"]["config"]["data"]["datasets"]}
    assert ds["int8 p99"][1] is None and ds["int8 p99"][0] is not None and None not in ds["base p99"]


@pytest.mark.parametrize(
    ("content", "says", "code"),
    [
        (b"not json {", "not JSON", 2),
        (orjson.dumps({"variants": []}), "not a loadgen report", 2),
        (orjson.dumps([1, 2]), "not a loadgen report", 2),
        (orjson.dumps({"schema": "loadgen.report/v0", "variants": []}), "report schema 'loadgen.report/v0'", 2),
        # A loadgen report of this version that is not whole: no usage to fix, no trend from it (exit 4).
        (
            orjson.dumps({"schema": "loadgen.report/v1", "variants": [{"name": "a"}]}),
            "not a complete loadgen report",
            4,
        ),
        (b'{"schema": "loadgen.report/v1", "varia', "a loadgen report that is not whole JSON", 4),
    ],
)
def test_bad_input_exits_2_and_a_broken_report_4_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, says: str, code: int
) -> None:
    good = _write(tmp_path, "good.json", _report(0))
    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    out = tmp_path / "trend.html"
    assert main(["trend", good, str(bad), "--out", str(out)]) == code
    err = capsys.readouterr().err
    assert str(bad) in err and says in err and "good.json" not in err
    assert not out.exists()


def test_a_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trend", str(tmp_path / "nope.json"), "--out", str(tmp_path / "t.html")]) == 2
    assert "nope.json: cannot read it" in capsys.readouterr().err
