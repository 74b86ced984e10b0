"""Reference answers of a dataset's rows (loadgen/traffic/references.py): each `match` judges as documented, a bad
reference is refused with its row's line, and the judged counts travel the aggregate's wire to a Wilson interval."""

from __future__ import annotations

import json
from array import array
from pathlib import Path

import pytest

from loadgen.config.errors import ConfigError
from loadgen.measure.outputs import OutputSamples
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report.quality import wilson
from loadgen.traffic.datasets import read_dataset
from loadgen.traffic.references import Reference, reference_of


def _ref(expected: str, match: str | None = None) -> Reference:
    ref = reference_of({"expected": expected} | ({"match": match} if match else {}))
    assert ref is not None
    return ref


def test_each_match_judges_as_documented() -> None:
    assert _ref("Paris").judge("  paris\n") and not _ref("Paris").judge("Paris.")  # exact: whitespace, case
    assert _ref("the capital is Paris", "contains").judge("I think The  capital is\nParis, yes")
    assert not _ref("Lyon", "contains").judge("Paris")
    assert _ref(r"\b42\b", "regex").judge("the answer: 42.") and not _ref(r"\b42\b", "regex").judge("420")
    choice = _ref("b", "choice")
    for reply in ("B", "(B) because", "The answer is B.", "I think B", "Answer: B) x", "A good one is B", "B because"):
        assert choice.judge(reply), reply
    for reply in ("A", "Because of A, not B", "Bees", "I. no", ""):
        assert not choice.judge(reply), reply
    assert reference_of({"prompt": "x"}) is None


@pytest.mark.parametrize(
    ("row", "field", "words"),
    [
        ({"match": "exact"}, "match", "without 'expected'"),
        ({"expected": ""}, "expected", "non-empty string"),
        ({"expected": "x", "match": "fuzzy"}, "match", "one of exact, contains, regex, choice"),
        ({"expected": "(", "match": "regex"}, "expected", "not a regular expression"),
        ({"expected": "Z", "match": "choice"}, "expected", "one label of A to J"),
    ],
)
def test_a_bad_reference_names_its_field(row: dict[str, str], field: str, words: str) -> None:
    with pytest.raises(ValueError) as e:
        reference_of(row)
    assert e.value.args[0] == field and words in e.value.args[1]


def test_a_dataset_row_carries_its_reference_and_a_bad_one_is_refused_at_its_line(tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"prompt": "2+2?", "expected": "4", "match": "contains"}) + "\n" + '{"prompt": "hi"}\n')
    records = read_dataset(good).records
    assert records[0].reference == Reference("4", "contains") and records[1].reference is None
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a"}\n' + json.dumps({"prompt": "b", "expected": "x", "match": "fuzzy"}) + "\n")
    with pytest.raises(ConfigError) as e:
        read_dataset(bad)
    assert ":2: match: expected one of exact" in str(e.value)


def _rec(variant: str, index: int, text: str, reference: Reference | None) -> RequestRecord:
    rec = RequestRecord(f"w-{variant}-3-{index}", variant, "qa", sent=1.0, chunk_times=array("d", [1.1, 1.2]))
    rec.done, rec.output_text, rec.chunk_text_ends, rec.reference = 1.2, text, array("l", [len(text)] * 2), reference
    return rec


def test_every_request_with_a_reference_is_judged_and_the_counts_merge() -> None:
    ref = Reference("yes", "contains")
    worker = OutputSamples(cap=2)  # the text sample is capped; the judging is not
    master = OutputSamples(cap=2)
    for i in range(10):
        worker.add(_rec("a", i, "yes indeed" if i % 4 else "no", ref))
        if i == 4:
            master.merge_wire(worker.to_wire())
            worker.clear_rows()
    failed = _rec("a", 99, "yes", ref)
    failed.error = ErrorKind.TIMEOUT  # no answer: not judged
    worker.add(failed)
    worker.add(_rec("a", 11, "yes", None))  # no reference: not judged
    master.merge_wire(worker.to_wire())
    assert master.judged == {("a", "qa"): [10, 7]}
    assert len(master.of("a")) <= 2


def test_the_wilson_interval_holds_its_known_values() -> None:
    lo, hi = wilson(150, 369)
    assert (round(lo, 4), round(hi, 4)) == (0.3576, 0.4573)
    lo, hi = wilson(10, 10)  # all right: the interval reaches 1, its low bound stays below
    assert hi == 1.0 and 0.69 < lo < 0.73
