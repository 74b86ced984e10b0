"""LoRA adapters (`variants[].adapters`): each mistake named at its field (exit 2 before any load); the seeded draw,
its shares, and that the same request names the same adapter everywhere; per (variant, adapter) results merged
across workers, in the report (JSON, Markdown, HTML) and judged by SLOs naming an adapter."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from array import array
from collections import Counter
from pathlib import Path

import pytest

from loadgen.config.adapters import Adapter, AdapterPlan
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import Scenario, parse_scenario
from loadgen.exit_codes import ExitCode
from loadgen.measure.aggregate import WIRE_VERSION, Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report import build_report, render_markdown
from loadgen.report.csv_records import COLUMNS, render_csv
from loadgen.report.html import render_html
from loadgen.traffic.sampler import sampler_for

from ..report_schema import checked

VARIANTS = """\
variants:
  - name: a
    base_url: "http://127.0.0.1:1"
    model: base-a
    adapters: [{name: sql, share: 2}, {name: chat}, {name: base-a}]
  - name: b
    base_url: "http://127.0.0.1:2"
    model: base-b
    adapters: [{name: base-b}, {name: chat}, {name: sql, share: 2}]
"""


def _scenario(rest: str = "") -> Scenario:
    return parse_scenario(VARIANTS + rest, "s.yaml")


def _issues(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        parse_scenario(textwrap.dedent(text), "s.yaml")
    return {i.path: i.message for i in err.value.issues}


# --- configuration ------------------------------------------------------------------------------------------------


def test_adapters_are_read_and_default_to_none() -> None:
    s = _scenario("slos:\n  - {metric: ttft, stat: p99, max_ms: 500, adapter: sql}\n")
    a = s.variants[0]
    assert [(x.name, x.share) for x in a.adapters] == [("sql", 2.0), ("chat", 1.0), ("base-a", 1.0)]
    assert s.slos[0].adapter == "sql"
    assert parse_scenario('variants: [{name: x, base_url: "http://h:1", model: m}]').variants[0].adapters == []


ONE = 'variants:\n  - {name: x, base_url: "http://127.0.0.1:1", model: m, dialect: DIALECT, adapters: ADAPTERS}\n'


@pytest.mark.parametrize(
    ("dialect", "adapters", "path", "words"),
    [
        ("tgi", "[{name: sql}]", "variants[0].adapters", "tgi requests cannot name a model each"),
        ("triton", "[{name: sql}]", "variants[0].adapters", "adapters are for openai-chat"),
        ("openai-chat", "[{name: sql}, {name: sql}]", "variants[0].adapters[1].name", "listed twice"),
        ("openai-chat", "[{name: sql, share: 0}]", "variants[0].adapters[0].share", "greater than 0"),
        ("openai-chat", "[{name: sql, share: .inf}]", "variants[0].adapters[0].share", "finite"),
        ("openai-chat", "[{name: 'has space'}]", "variants[0].adapters[0].name", ""),
        ("openai-chat", "[{name: sql, weight: 2}]", "variants[0].adapters[0].weight", "unknown field"),
    ],
)
def test_each_adapter_mistake_names_its_field(dialect: str, adapters: str, path: str, words: str) -> None:
    issues = _issues(ONE.replace("DIALECT", dialect).replace("ADAPTERS", adapters))
    assert path in issues and words in issues[path], issues


def test_an_slo_names_an_adapter_some_variant_lists_and_nothing_else_with_it() -> None:
    assert (
        "no variant lists adapter 'nope'"
        in _issues(VARIANTS + "slos: [{metric: e2e, stat: p50, max_ms: 9, adapter: nope}]\n")["slos[0].adapter"]
    )
    assert (
        "variant 'b' does not list adapter 'base-a'"
        in _issues(VARIANTS + "slos: [{metric: e2e, stat: p50, max_ms: 9, adapter: base-a, variant: b}]\n")[
            "slos[0].adapter"
        ]
    )
    both = VARIANTS + "slos: [{metric: e2e, stat: p50, max_ms: 9, adapter: sql, mix: chat}]\n"
    assert "one of them" in _issues(both)["slos[0].adapter"]


def test_adapters_on_tgi_are_exit_2_before_any_load(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(ONE.replace("DIALECT", "tgi").replace("ADAPTERS", "[{name: sql}]"), encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "run", str(path), "--quiet"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == ExitCode.USAGE == 2, proc.stderr
    assert "variants[0].adapters: tgi requests cannot name a model each" in proc.stderr


# --- the draw -----------------------------------------------------------------------------------------------------

# An adapter's count over N requests is binomial(N, share): outside 4.5 sigma with probability 6.8e-6.
N = 20_000
SIGMAS = 4.5


def _within(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p))


def _plan(v: int = 0, seed: int = 11) -> AdapterPlan:
    variant = _scenario().variants[v]
    return AdapterPlan(variant.adapters, seed, variant.model)


def test_adapter_shares_match_the_configured_shares() -> None:
    plan = _plan()
    counts = Counter(plan.draw(stream, i) for stream in (0, 1, 100_000) for i in range(N // 3))
    n = sum(counts.values())
    assert set(counts) == {"sql", "chat", "base-a"}
    for name, p in (("sql", 0.5), ("chat", 0.25), ("base-a", 0.25)):
        assert _within(counts[name], n, p), (name, counts)


def test_the_same_request_names_the_same_adapter_in_every_variant_and_worker() -> None:
    # Listed in another order, with another base model name: variant b sends request (stream, i) where a does.
    a, b = _plan(0), _plan(1)
    rename = {"base-a": "base-b"}
    for stream in (0, 3, 100_000 + 3):  # open loop, a worker's user slot, the second worker's same slot
        assert [rename.get(a.draw(stream, i), a.draw(stream, i)) for i in range(2000)] == [
            b.draw(stream, i) for i in range(2000)
        ]
    # Rebuilt (another worker process) it agrees; another seed or stream draws otherwise.
    assert [_plan().draw(5, i) for i in range(500)] == [a.draw(5, i) for i in range(500)]
    assert [_plan(seed=12).draw(5, i) for i in range(500)] != [a.draw(5, i) for i in range(500)]
    assert [a.draw(6, i) for i in range(500)] != [a.draw(5, i) for i in range(500)]


def test_the_adapter_is_drawn_apart_from_the_class_and_the_mix() -> None:
    # Each class's (and mix's) requests split over the adapters by the same shares: the draws are independent.
    s = parse_scenario(
        VARIANTS + "traffic:\n  mixes: [{name: chat}, {name: rag}]\n  classes: [{name: x}, {name: y}]\n", "s.yaml"
    )
    sampler, plan = sampler_for(s, 4), _plan()
    by: dict[str, Counter[str]] = {}
    for i in range(N):
        spec = sampler.spec_at(i)
        adapter = plan.draw(4, i)
        by.setdefault(spec.priority_class, Counter())[adapter] += 1
        by.setdefault(spec.mix, Counter())[adapter] += 1
    assert set(by) == {"x", "y", "chat", "rag"}
    for key, counts in by.items():
        n = sum(counts.values())
        assert _within(counts["sql"], n, 0.5) and _within(counts["chat"], n, 0.25), (key, counts)


def test_one_adapter_takes_every_request() -> None:
    plan = AdapterPlan([Adapter(name="only")], 1, "m")
    assert {plan.draw(0, i) for i in range(100)} == {"only"}


# --- results ------------------------------------------------------------------------------------------------------


def _rec(i: int, adapter: str, ttft: float, variant: str = "a", **kw: object) -> RequestRecord:
    sent = 100.0 + i
    times = array("d", [sent + ttft + 0.01 * k for k in range(5)])
    rec = RequestRecord(f"{variant}-{adapter}-{i}", variant, "chat", "short", sent=sent, adapter=adapter)
    rec.chunk_times, rec.chunk_tokens = times, array("l", [1] * 5)
    rec.done, rec.output_tokens, rec.prompt_tokens, rec.finish_reason = times[-1], 5, 30, "length"
    for k, v in kw.items():
        setattr(rec, k, v)
    return rec


def _records() -> list[RequestRecord]:
    out = []
    for i in range(60):
        out.append(_rec(i, "sql", 0.3 + 0.001 * i))  # slow: say it loads
        if i % 2 == 0:
            out.append(_rec(i, "chat", 0.05))
        if i % 3 == 0:
            out.append(_rec(i, "base-a", 0.04))
    out.append(_rec(90, "chat", 0.0, chunk_times=array("d"), chunk_tokens=array("l"), error=ErrorKind.TIMEOUT))
    out.append(_rec(91, "sql", 0.05, warmup=True))
    out += [_rec(i, "chat", 0.08, variant="b") for i in range(10)]
    return out


def test_adapters_merge_across_workers_and_reach_every_rendering() -> None:
    alone, w1, w2, master = Aggregate(), Aggregate(), Aggregate(), Aggregate()
    for i, rec in enumerate(_records()):
        alone.add(rec, 0.0)
        (w1 if i % 2 else w2).add(rec, 0.0)
    wire = w1.pop_delta(histograms=False)
    assert wire["v"] == WIRE_VERSION and wire["adapters"]
    for delta in (wire, w1.pop_delta(), w2.pop_delta()):
        master.merge_wire(delta)
    assert set(master.adapters) == set(alone.adapters) == {("a", "sql"), ("a", "chat"), ("a", "base-a"), ("b", "chat")}
    for key, want in alone.adapters.items():
        got = master.adapters[key]
        assert (got.requests, got.ok, got.errors, got.warmup_excluded) == (
            want.requests,
            want.ok,
            want.errors,
            want.warmup_excluded,
        )
        assert {m: h.encode() for m, h in got.hists.items()} == {m: h.encode() for m, h in want.hists.items()}

    slos = (
        "slos:\n  - {metric: ttft, stat: p50, max_ms: 100, adapter: sql}\n"
        "  - {metric: success_rate, min_percent: 99, adapter: chat}\n"
    )
    report = checked(build_report(_scenario(slos), master, 60.0))
    a, b = (v["adapters"] for v in report["variants"])
    assert list(a) == ["sql", "chat", "base-a"] and list(b) == ["base-b", "chat", "sql"]  # each variant's order
    assert (a["sql"]["requests"], a["chat"]["requests"], a["base-a"]["requests"]) == (60, 31, 20)
    assert (a["chat"]["ok"], a["chat"]["errors"], a["sql"]["warmup_excluded"]) == (30, {"timeout": 1}, 1)
    assert a["sql"]["share"] == pytest.approx(60 / 111, abs=1e-4) and a["sql"]["configured_share"] == 0.5
    assert (a["base-a"]["base"], a["sql"]["base"], b["base-b"]["requests"]) == (True, False, 0)
    assert a["sql"]["metrics_ms"]["ttft"]["p50"] == pytest.approx(329.5, rel=0.01)
    # The SLO on sql is judged on both variants (b has no sql request: no data, a fail); chat's success on both.
    judged = {(s["variant"], s["adapter"]): s for s in report["slos"]}
    assert set(judged) == {("a", "sql"), ("b", "sql"), ("a", "chat"), ("b", "chat")}
    assert judged[("a", "sql")]["observed_ms"] == a["sql"]["metrics_ms"]["ttft"]["p50"]
    assert not judged[("a", "sql")]["passed"] and judged[("a", "sql")]["breaching_requests"] == 60
    assert not judged[("a", "chat")]["passed"] and judged[("b", "chat")]["passed"]
    assert report["exit_code"] == ExitCode.SLO_BREACHED
    md = render_markdown(report)
    assert "## LoRA adapters (ms)" in md and "| a | base-a (base) | 20 |" in md and "| adapter sql |" in md
    page = render_html(report)
    assert "<h2>LoRA adapters (ms)</h2>" in page and "<td>base-a (base)</td>" in page


def test_a_run_without_adapters_reports_none() -> None:
    agg = Aggregate()
    agg.add(_rec(0, "", 0.05), 0.0)
    assert not agg.adapters
    s = parse_scenario('variants: [{name: a, base_url: "http://h:1", model: m}]', "s.yaml")
    report = checked(build_report(s, agg, 10.0))
    assert "adapters" not in report["variants"][0] and "LoRA adapters" not in render_markdown(report)


def test_the_raw_record_and_its_csv_row_carry_the_adapter() -> None:
    row = _rec(3, "sql", 0.05).to_json()
    assert row["adapter"] == "sql" and RequestRecord.from_json(row).adapter == "sql"
    cells = dict(zip(COLUMNS, render_csv([row]).splitlines()[1].split(","), strict=True))
    assert cells["adapter"] == "sql"
