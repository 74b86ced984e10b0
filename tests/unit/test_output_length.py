"""The report says, per variant, whether outputs were asked to be exactly max_tokens (`output_length`)."""

from __future__ import annotations

from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.report import build_report, render_markdown

SCENARIO = """
variants:
  - {name: vllm, base_url: "http://127.0.0.1:1", model: m}
  - {name: tgi, base_url: "http://127.0.0.1:2", model: m, dialect: tgi}
  - {name: hosted, base_url: "https://api.openai.com", model: m}
  - {name: asked, base_url: "https://api.openai.com", model: m, exact_output: true}
"""


def _report(text: str) -> dict:
    return build_report(parse_scenario(text), Aggregate(), 10.0)


def test_output_length_per_variant_in_json_and_markdown() -> None:
    report = _report(SCENARIO)
    assert {v["name"]: v["output_length"] for v in report["variants"]} == {
        "vllm": "enforced",
        "tgi": "max_only",
        "hosted": "max_only",
        "asked": "enforced",
    }
    md = render_markdown(report)
    assert "Output lengths: max_tokens only a cap (a request may stop early at EOS) for tgi, hosted" in md
    assert "Output lengths: exactly max_tokens (EOS ignored) for the others" in md


def test_markdown_names_no_variant_when_all_agree() -> None:
    md = render_markdown(_report('variants: [{name: a, base_url: "http://127.0.0.1:1", model: m}]'))
    assert "Output lengths: exactly max_tokens (EOS ignored)\n" in md and "only a cap" not in md
    md = render_markdown(_report('variants: [{name: a, base_url: "http://127.0.0.1:1", model: m, dialect: tgi}]'))
    assert "only a cap (a request may stop early at EOS) for a\n" in md and "EOS ignored" not in md
