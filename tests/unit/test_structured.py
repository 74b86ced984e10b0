"""Structured output judged (measure/structured.py): each verdict for the replies that earn it, under every kind of
response_format, and the report's counts and share from a group's counts."""

from __future__ import annotations

import pytest

from loadgen.measure.aggregate import GroupStats
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.records import RequestRecord
from loadgen.measure.structured import StructuredJudge
from loadgen.measure.tool_calls import add_tool_calls
from loadgen.report.tool_calls import tool_calls_json, tool_calls_lines

_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "limit": {"type": "integer"}},
    "required": ["city", "limit"],
}
_FMT = {"type": "json_schema", "json_schema": {"name": "reply", "schema": _SCHEMA}}


@pytest.mark.parametrize(
    ("text", "fmt", "want"),
    [
        ('{"city": "Oslo", "limit": 3}', _FMT, "valid"),
        ('{"city": "Oslo", "limit": "3"}', _FMT, "off_schema"),  # a string where the schema asks an integer
        ('{"city": "Oslo"}', _FMT, "off_schema"),  # a required property missing
        ('{"city": "Oslo", "limit": 3', _FMT, "not_json"),  # cut by max_tokens before the object closed
        ('Sure! {"city": "Oslo", "limit": 3}', _FMT, "not_json"),  # prose around it: the server ignored the format
        ("", _FMT, "not_json"),
        ('{"answer": "x"}', {"type": "json_object"}, "valid"),
        ("[1, 2]", {"type": "json_object"}, "not_json"),  # JSON, but not the object json_object asks for
        ('{"a": 1}', {"type": "json_schema", "json_schema": {"schema": {"type": "array"}}}, "off_schema"),
    ],
)
def test_each_reply_gets_the_verdict_it_earns(text: str, fmt: dict, want: str) -> None:
    assert StructuredJudge().judge(text, fmt) == want


def test_a_schema_is_compiled_once_and_a_new_one_is_not_mistaken_for_it() -> None:
    judge = StructuredJudge()
    assert judge.judge('{"city": "a", "limit": 1}', _FMT) == "valid"
    other = {"type": "json_schema", "json_schema": {"schema": {"type": "object", "required": ["zip"]}}}
    assert judge.judge('{"city": "a", "limit": 1}', other) == "off_schema"
    assert judge.judge('{"city": "a", "limit": 1}', _FMT) == "valid"


def test_the_report_counts_each_verdict_and_the_share() -> None:
    g = GroupStats()

    def hist(metric: str) -> LatencyHistogram:
        return g.hists.setdefault(metric, LatencyHistogram())

    for i, verdict in enumerate(["valid"] * 7 + ["not_json"] * 2 + ["off_schema"] + [""] * 3):
        rec = RequestRecord(f"r{i}", "v", "m", sent=1.0, carried_tools=True, structured=verdict)
        add_tool_calls(g.reasoning, hist, rec)
    out = tool_calls_json(g, {"m": g})
    assert out is not None
    assert out["requests"] == 13
    assert out["structured"] == {"judged": 10, "valid": 7, "not_json": 2, "off_schema": 1, "valid_share": 0.7}
    table = "\n".join(tool_calls_lines({"variants": [{"name": "v", "tool_calls": out}]}))
    assert "| 70.0 % of 10 |" in table, table
