"""Quality beside speed: the bounded sample of reply texts (loadgen/measure/outputs.py) keeps the same requests in
every variant whatever the merge order, and `report["quality"]` (loadgen/report/quality.py) measures agreement,
exact matches and edit similarity against texts whose differences are known."""

from __future__ import annotations

import html
import random
from array import array

import numpy as np

from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.outputs import MAX_CHARS, OutputSamples
from loadgen.measure.pairs import pair_hash
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report import build_report, render_markdown
from loadgen.report.html import render_html
from loadgen.report.quality import levenshtein

from ..report_schema import checked

WORDS = [f"w{i}" for i in range(50)]


def _rec(variant: str, index: int, text: str, *, mix: str = "chat", worker: str = "r1-w0-1") -> RequestRecord:
    times = array("d", [10.0 + 0.01 * k for k in range(4)])
    rec = RequestRecord(f"{worker}-{variant}-7-{index}", variant, mix, sent=9.9, chunk_times=times)
    rec.chunk_tokens = array("l", [1] * 4)
    rec.done = times[-1]
    rec.output_text = text
    rec.chunk_text_ends = array("l", [len(text)] * 4)
    return rec


def _dp(a: list[int], b: list[int]) -> int:
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def test_the_bit_parallel_edit_distance_is_the_table_s() -> None:
    r = random.Random(3)
    for _ in range(2000):
        a = [r.randrange(4) for _ in range(r.randrange(0, 40))]
        b = [r.randrange(4) for _ in range(r.randrange(0, 40))]
        assert levenshtein(a, b) == _dp(a, b), (a, b)
    long_a = [r.randrange(50) for _ in range(300)]  # wider than a machine word
    long_b = [t if r.random() < 0.9 else -1 for t in long_a] + [1, 2]
    assert levenshtein(long_a, long_b) == _dp(long_a, long_b)


def test_the_sample_is_bounded_and_keeps_the_same_requests_in_every_variant_whatever_the_merge_order() -> None:
    cap = 40
    workers = []
    for w in range(3):  # each worker ships deltas, then forgets its texts
        o = OutputSamples(cap)
        shipped = []
        for i in range(w * 300, (w + 1) * 300):
            for v in ("base", "int8"):
                o.add(_rec(v, i, f"reply {i}"))
            if i % 50 == 49:
                shipped.append(o.to_wire())
                o.clear_rows()
        workers.append(shipped)
    merged = []
    for order in ([0, 1, 2], [2, 0, 1]):
        master = OutputSamples(cap)
        deltas = [d for w in order for d in workers[w]]
        for d in deltas:
            master.merge_wire(d)
        merged.append(master)
    a, b = merged
    assert a.of("base") == b.of("base") and a.of("int8").keys() == a.of("base").keys()
    assert 0 < len(a.of("base")) <= cap
    # The kept set is exactly the keys under the final threshold, of all 900 requests.
    top = 1 << (63 - a.level)
    expected = {pair_hash(f"7-{i}-0") for i in range(900) if pair_hash(f"7-{i}-0") < top}
    assert set(a.of("base")) == expected
    assert a.of("base")[pair_hash("7-5-0")][1] == "reply 5" if pair_hash("7-5-0") in expected else True


def test_only_whole_replies_of_the_window_are_kept_and_cut_at_max_chars() -> None:
    o = OutputSamples()
    failed = _rec("a", 1, "half")
    failed.error = ErrorKind.TIMEOUT
    warm = _rec("a", 2, "warm")
    warm.warmup = True
    untexted = _rec("a", 3, "")
    untexted.chunk_text_ends = None  # the stream did not keep its text
    for r in (failed, warm, untexted, _rec("a", 4, "x" * (MAX_CHARS + 10))):
        o.add(r)
    assert list(o.of("a").values()) == [("chat", "x" * MAX_CHARS)]


def _perturbed(text: list[str], share: float, g: random.Random) -> list[str]:
    return [w if g.random() >= share else "zz" for w in text]


QUALITY = """
seed: 5
quality: {first_k: 16}
variants:
  - {name: base, base_url: "http://127.0.0.1:1", model: m}
  - {name: int8, base_url: "http://127.0.0.1:2", model: m}
  - {name: twin, base_url: "http://127.0.0.1:3", model: m}
"""


def test_agreement_exact_match_and_edit_similarity_hold_the_truth_with_intervals() -> None:
    g = random.Random(9)
    agg = Aggregate()
    agree = compared = 0
    sims = []
    for i in range(400):
        mix = "chat" if i % 2 else "code"
        base = [g.choice(WORDS) for _ in range(g.randrange(10, 30))]
        int8 = _perturbed(base, 0.1, g)
        n = min(16, len(base))
        agree += sum(x == y for x, y in zip(base[:n], int8[:n], strict=True))
        compared += n
        sims.append(1 - sum(x != y for x, y in zip(base, int8, strict=True)) / len(base))
        for v, words in (("base", base), ("int8", int8), ("twin", base)):
            agg.add(_rec(v, i, " ".join(words), mix=mix), 20.0)
    report = checked(build_report(parse_scenario(QUALITY), agg, 10.0))
    q = report["quality"]
    assert q["method"]["tokens"] == "whitespace" and q["method"]["first_k"] == 16
    by = {(e["variant"], e["mix"]): e for e in q["entries"]}
    assert set(by) == {(v, m) for v in ("int8", "twin") for m in ("*", "chat", "code")}
    e = by[("int8", "*")]
    assert e["pairs"] == 400 and e["positions"] == compared
    a = e["agreement"]
    assert a["value"] == round(agree / compared, 4)
    assert a["ci_low"] < a["value"] < a["ci_high"] and a["ci_high"] - a["ci_low"] < 0.05
    assert a["ci_low"] <= 0.9 <= a["ci_high"]  # the share perturbed, a population truth
    # A substitution-only perturbation: the edit distance is the number of substituted words.
    assert e["edit_similarity"]["value"] == round(float(np.mean(sims)), 4)
    exact = sum(s == 1.0 for s in sims) / 400
    assert e["exact_match"]["value"] == round(exact, 4)
    assert by[("int8", "chat")]["pairs"] == by[("int8", "code")]["pairs"] == 200
    twin = by[("twin", "*")]
    assert twin["agreement"]["value"] == twin["exact_match"]["value"] == twin["edit_similarity"]["value"] == 1.0
    assert e["headline"].startswith("int8: ") and "agreement with base on the first 16 tokens" in e["headline"]
    assert f"{100 * a['value']:.1f} %" in e["headline"]
    md = render_markdown(report)
    assert e["headline"] in md
    assert "| int8 | chat | 200 | " in md and "| twin | all | 400 | 100.0 % (100.0–100.0) |" in md
    page = render_html(report)
    assert "<h2>Quality beside speed</h2>" in page and html.escape(e["headline"]) in page


def test_without_quality_there_is_no_section_and_texts_are_not_kept() -> None:
    scenario = parse_scenario(QUALITY.replace("quality: {first_k: 16}\n", ""))
    assert scenario.quality is None
    agg = Aggregate()
    agg.add(_rec("base", 1, "a b"), 20.0)
    assert "quality" not in checked(build_report(scenario, agg, 10.0))
    # With quality: but no text (a report rebuilt from raw records): the section says so rather than "no pairs".
    untexted = _rec("base", 1, "")
    untexted.chunk_text_ends = None
    agg = Aggregate()
    agg.add(untexted, 20.0)
    report = checked(build_report(parse_scenario(QUALITY), agg, 10.0))
    assert report["quality"]["entries"] == [] and "raw records" in report["quality"]["method"]["note"]
    assert "No reply text reached this report" in render_markdown(report)
