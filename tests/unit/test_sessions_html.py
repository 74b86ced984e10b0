"""The HTML report's agent sessions section (report/sessions_html.py): report.md's table from the same cells, the
paired comparison's lines, and a timeline per variant whose data are the report's kept sessions, rows aligned across
variants; nothing of it in a report without sessions."""

from __future__ import annotations

from typing import Any

from loadgen.report.html import render_html
from loadgen.report.sessions import session_cells
from loadgen.report.sessions_html import timeline_charts
from tests.unit.test_report_html import _data
from tests.unit.test_report_html import _report as _plain_report
from tests.unit.test_session_timelines import _report


def _charts(page: str) -> dict[str, dict[str, Any]]:
    return {c["id"]: c for c in _data(page)["charts"]}


def test_the_section_holds_the_table_the_comparison_and_a_timeline_per_variant() -> None:
    report = _report()
    page = render_html(report)
    assert "<h2>Agent sessions</h2>" in page
    for v in report["variants"]:
        for cell in session_cells(v["sessions"]["agent"]).values():
            assert f"<td>{cell}</td>" in page or f"<td class=text>{cell}</td>" in page, cell
    assert "session duration p50" in page  # the paired comparison's line
    charts = _charts(page)
    base, fast = charts["session-timeline-0"], charts["session-timeline-1"]
    # Placed in the section, not in the chart grid; drawn from the same embedded data as every chart.
    assert page.index('id="session-timeline-0"') < page.index("<h2>Charts</h2>")
    assert page.count('id="session-timeline-0"') == 1
    assert base["config"]["options"]["indexAxis"] == "y"
    # The same rows in the same order on both variants, and the same time axis.
    assert base["config"]["data"]["labels"] == fast["config"]["data"]["labels"]
    assert base["config"]["options"]["scales"]["x"]["max"] == fast["config"]["options"]["scales"]["x"]["max"]
    labels = base["config"]["data"]["labels"]
    first = report["variants"][0]["sessions_timeline"]["sessions"][0]
    assert labels[:2] == [f"task {first['key']}", f"{first['key']} ↳ sub-agent 1"]  # the sub-agent under its task
    # Its bars are the kept steps: TTFT from sent, the rest to the end, the tools after (seconds).
    ttft, rest, tools = base["config"]["data"]["datasets"]
    _, step, sent, t, done, tool = first["steps"][0]
    assert step == 1 and ttft["data"][0] == {"x": [sent / 1e3, (sent + t) / 1e3], "y": labels[0]}
    assert rest["data"][0] == {"x": [(sent + t) / 1e3, done / 1e3], "y": labels[0]}
    assert tools["data"][0] == {"x": [done / 1e3, (done + tool) / 1e3], "y": labels[0]}
    assert all(ds["grouped"] is False for ds in (ttft, rest, tools))  # one row per agent: the bars overlap
    assert len(ttft["pointLabels"]) == len(ttft["data"])


def test_a_task_only_one_variant_kept_has_an_empty_row_on_the_other() -> None:
    report = _report()
    fast = report["variants"][1]["sessions_timeline"]
    dropped = fast["sessions"].pop(0)["key"]
    charts = timeline_charts(report)
    assert charts[0]["config"]["data"]["labels"] == charts[1]["config"]["data"]["labels"]
    assert f"task {dropped}" in charts[1]["config"]["data"]["labels"]
    assert not any(p["y"] == f"task {dropped}" for ds in charts[1]["config"]["data"]["datasets"] for p in ds["data"])


def test_a_report_without_sessions_has_none_of_it() -> None:
    page = render_html(_plain_report())
    assert "Agent sessions" not in page and "session-timeline" not in page
    assert not any(c["id"].startswith("session-") for c in _data(page)["charts"])
