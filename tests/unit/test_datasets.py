"""Dataset replay: every file is written by the test into tmp_path; nothing is downloaded."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pytest

from loadgen.config.errors import ConfigError
from loadgen.exit_codes import ExitCode
from loadgen.traffic.dataset_selection import LengthFilter, filter_dataset, load_dataset, sample_dataset
from loadgen.traffic.datasets import Dataset, DatasetRecord, Message, read_dataset


def _jsonl(tmp_path: Path, rows: Sequence[object], name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _text(tmp_path: Path, text: str, name: str = "data.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _error(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        read_dataset(path)
    return info.value


def _sharegpt(*turns: tuple[str, str], **extra: object) -> dict[str, object]:
    return {"id": "x", "conversations": [{"from": who, "value": text} for who, text in turns], **extra}


# --- the formats --------------------------------------------------------------------------------------------


def test_simple_jsonl_rows_become_records_with_their_lines(tmp_path: Path) -> None:
    path = _text(
        tmp_path,
        '{"prompt": "Tell me a story", "output_tokens": 128}\n'
        "\n"
        '{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi there"}]}\n'
        '{"prompt": "Just this", "id": 7, "tags": ["metadata is ignored"]}\r\n',
    )
    dataset = read_dataset(path)
    assert dataset.source == str(path) and dataset.rows == 3 and dataset.skipped == ()
    first, second, third = dataset.records
    assert first == DatasetRecord(1, 0, "Tell me a story", None, 128)
    assert second.line == 3 and second.row == 1 and second.prompt is None and second.output_tokens is None
    assert second.messages == (Message("system", "Be brief."), Message("user", "Hi there"))
    assert third.line == 4 and third.prompt == "Just this"
    assert (first.prompt_chars, first.prompt_words) == (15, 4)
    assert (second.prompt_chars, second.prompt_words) == (17, 4)


def test_sharegpt_json_replays_the_first_exchange(tmp_path: Path) -> None:
    rows = [
        _sharegpt(("human", "What is two plus two?"), ("gpt", "Four, of course."), ("human", "And 3+3?"), ("gpt", "6")),
        _sharegpt(("system", "You are terse."), ("human", "Name a colour"), ("gpt", "Blue")),
        _sharegpt(("human", "Only a question")),
        _sharegpt(("gpt", "Hello! How can I help?"), ("human", "Say hi"), ("gpt", "hi there")),
        _sharegpt(("human", "Hi"), ("gpt", "Hello"), output_tokens=50),
        _sharegpt(("user", "aliases"), ("chatgpt", "are accepted")),
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(rows, indent=2), encoding="utf-8")
    records = read_dataset(path).records
    assert [r.messages for r in records] == [
        (Message("user", "What is two plus two?"),),
        (Message("system", "You are terse."), Message("user", "Name a colour")),
        (Message("user", "Only a question"),),
        (Message("assistant", "Hello! How can I help?"), Message("user", "Say hi")),
        (Message("user", "Hi"),),
        (Message("user", "aliases"),),
    ]
    # Output length: the reply's words (estimated), the row's own count when it gives one, None without a reply.
    assert [(r.output_tokens, r.output_tokens_estimated) for r in records] == [
        (3, True),
        (1, True),
        (None, False),
        (2, True),
        (50, False),
        (2, True),
    ]
    # Each record's line is where its row starts in the pretty-printed list.
    lines = path.read_text().splitlines()
    for record in records:
        assert lines[record.line - 1].strip() == "{"
        assert lines[record.line].strip() == '"id": "x",'
    assert len({r.line for r in records}) == len(records)


def test_sharegpt_jsonl_and_mixed_rows(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [_sharegpt(("human", "a b c"), ("gpt", "d e")), {"prompt": "p"}])
    first, second = read_dataset(path).records
    assert first.messages == (Message("user", "a b c"),) and first.output_tokens == 2
    assert second.prompt == "p" and second.line == 2


def test_conversations_without_a_human_turn_are_skipped_and_counted(tmp_path: Path) -> None:
    rows = [_sharegpt(), _sharegpt(("gpt", "monologue")), _sharegpt(("human", "ok"), ("gpt", "fine"))]
    dataset = read_dataset(_jsonl(tmp_path, rows))
    assert len(dataset.records) == 1 and dataset.rows == 3
    assert dataset.skipped == (("conversation without a human turn", 2),) and dataset.skipped_total == 2


def test_a_byte_order_mark_and_an_empty_json_list(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"prompt": "x"}\n')
    assert read_dataset(path).records[0].prompt == "x"
    assert str(_error(_text(tmp_path, " [ ]\n", "empty.json"))).endswith("empty.json: the dataset has no rows")


# --- malformed input: file, line, field, what was expected ------------------------------------------------


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (
            {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "bot"}]},
            "messages[2].role: expected one of system, user, assistant, got 'bot'",
        ),
        ({"messages": [{"role": "user"}]}, "messages[0].content: required field is missing"),
        ({"messages": [{"content": "x"}]}, "messages[0].role: required field is missing"),
        ({"messages": [{"role": "user", "content": ["a"]}]}, "messages[0].content: expected a string, got ['a']"),
        ({"messages": ["hi"]}, "messages[0]: expected an object with 'role' and 'content', got 'hi'"),
        ({"messages": []}, "messages: expected a non-empty list of {role, content}, got []"),
        ({"messages": "hi"}, "messages: expected a non-empty list of {role, content}, got 'hi'"),
        (
            {"messages": [{"role": "user", "contnet": "x"}]},
            "messages[0].contnet: unknown field; did you mean 'content'?",
        ),
        ({"prompt": 3}, "prompt: expected a non-empty string, got 3"),
        ({"prompt": ""}, "prompt: expected a non-empty string, got ''"),
        ({"prompt": "x", "output_tokens": 0}, "output_tokens: must be at least 1, got 0"),
        ({"prompt": "x", "output_tokens": 2.5}, "output_tokens: expected a whole number >= 1, got 2.5"),
        ({"prompt": "x", "output_tokens": True}, "output_tokens: expected a whole number >= 1, got True"),
        ({"prompt": "x", "output_tokens": "9"}, "output_tokens: expected a whole number >= 1, got '9'"),
        ({"prompt": "x", "output_token": 9}, "output_token: unknown field; did you mean 'output_tokens'?"),
        ({"promt": "x"}, "promt: unknown field; did you mean 'prompt'?"),
        ({"prompt": "x", "messages": []}, "has both 'prompt' and 'messages'; give one"),
        ({"id": 1, "text": "x"}, "expected 'prompt' (a string), 'messages' (a list of {role, content}) or ShareGPT"),
        (
            {"conversations": {"from": "human"}},
            "conversations: expected a list of {from, value} turns, got {'from': 'human'}",
        ),
        ({"conversations": [{"from": "bot", "value": "x"}]}, "conversations[0].from: expected one of human, gpt,"),
        ({"conversations": [{"from": "human"}]}, "conversations[0].value: required field is missing"),
        ({"conversations": [{"from": "human", "value": None}]}, "conversations[0].value: expected a string, got null"),
        (
            {"conversations": [{"from": "human", "value": "x"}], "output_token": 5},
            "output_token: unknown field; did you mean 'output_tokens'?",
        ),
        ({"conversations": [{"from": "human", "valeu": "x"}]}, "conversations[0].valeu: unknown field; did you mean"),
        ({"conversations": [["human", "x"]]}, "conversations[0]: expected an object with 'from' and 'value'"),
        (["a", "list"], "expected an object (a row), got ['a', 'list']"),
        ("text", "expected an object (a row), got 'text'"),
    ],
)
def test_a_malformed_jsonl_row_names_file_line_and_field(tmp_path: Path, row: object, expected: str) -> None:
    good = {"prompt": "fine"}
    rows = [good] * 16 + [row] + [good]
    error = _error(_jsonl(tmp_path, rows))
    assert error.exit_code == ExitCode.USAGE == 2
    assert len(error.issues) == 1
    assert str(error).startswith(f"{tmp_path / 'data.jsonl'}:17: {expected}")


def test_a_malformed_row_of_a_json_list_names_the_line_it_starts_on_and_its_index(tmp_path: Path) -> None:
    rows = [_sharegpt(("human", "q"), ("gpt", "a")) for _ in range(3)]
    rows[2]["conversations"][1]["from"] = "bot"  # type: ignore[index]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    openings = [i for i, text in enumerate(path.read_text().splitlines(), 1) if text == " {"]
    line = openings[2]  # the third row's opening brace
    assert str(_error(path)) == (
        f"{path}:{line}: [2].conversations[1].from: expected one of human, gpt, system "
        "(or user, assistant, chatgpt, bing, bard), got 'bot'"
    )


def test_every_malformed_row_is_listed_in_line_order_up_to_twenty(tmp_path: Path) -> None:
    rows: list[object] = [{"prompt": i} for i in range(25)]
    error = _error(_jsonl(tmp_path, rows))
    assert [issue.line for issue in error.issues[:20]] == list(range(1, 21))
    assert error.issues[-1].message == "... and 5 more malformed row(s) not shown"


def test_invalid_json_lines_are_reported_with_the_others(tmp_path: Path) -> None:
    path = _text(tmp_path, '{"prompt": "a"}\n{"prompt": "b",}\n  {oops\n{"prompt": 1}\n')
    lines = str(_error(path)).splitlines()
    # The reason after the column is orjson's own words, which vary across its versions (3.9: "unexpected
    # character"; later: "unexpected character, expected a string key"): held to their start.
    assert [line.split(", expected")[0] for line in lines] == [
        f"{path}:2: invalid JSON at column 15: trailing comma is not allowed",
        f"{path}:3: invalid JSON at column 4: unexpected character",
        f"{path}:4: prompt: expected a non-empty string, got 1",
    ]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ('[\n  {"prompt": "a"},\n  {"prompt": "b",}\n]', 3, "invalid JSON: Expecting property name"),
        ('[\n  {"prompt": "a"}\n  {"prompt": "b"}\n]', 3, "invalid JSON: expected ',' or ']' after a row of the list"),
        ('[\n  {"prompt": "a"},\n]', 3, "invalid JSON: Expecting value"),
        ('[{"prompt": "a"}]\n\n{"prompt": "b"}', 3, "invalid JSON: more data after the list"),
        ('[{"prompt": "a"}', 1, "invalid JSON: expected ',' or ']' after a row of the list"),
        ("[" * 100_000, 1, "invalid JSON: nested too deeply"),
    ],
)
def test_a_broken_json_list_names_the_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = _text(tmp_path, text, "data.json")
    assert str(_error(path)).startswith(f"{path}:{line}: {message}")


def test_one_pretty_printed_object_is_named_as_such(tmp_path: Path) -> None:
    path = _text(tmp_path, '{\n  "data": [{"prompt": "a"}]\n}\n', "data.json")
    assert "the file is one JSON object spread over several lines" in str(_error(path))


def test_unreadable_empty_and_non_utf8_files(tmp_path: Path) -> None:
    missing = tmp_path / "missing.jsonl"
    assert str(_error(missing)) == f"{missing}: cannot read the dataset: No such file or directory"
    blank = _text(tmp_path, "\n  \n", "blank.jsonl")
    assert "blank.jsonl: the file is empty" in str(_error(blank))
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes(b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n')
    assert str(_error(latin)).startswith(f"{latin}:2: not UTF-8 text (byte 31: invalid continuation byte)")


def test_nothing_usable_is_an_error(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [_sharegpt(("gpt", "x")), _sharegpt()])
    assert str(_error(path)) == f"{path}: no usable rows: all 2 skipped (2 conversation without a human turn)"


# --- filters --------------------------------------------------------------------------------------------------


def _dataset(tmp_path: Path) -> Dataset:
    rows = [{"prompt": " ".join(["word"] * n), "output_tokens": 10 * n} for n in range(1, 11)]
    return read_dataset(_jsonl(tmp_path, [*rows, {"prompt": "no output length given at all, long enough"}]))


def test_length_filters_keep_what_is_inside_the_bounds_and_count_the_rest(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path)
    kept = filter_dataset(dataset, LengthFilter(min_prompt_tokens=3, max_prompt_tokens=8, max_output_tokens=70))
    assert [r.prompt_words for r in kept.records] == [3, 4, 5, 6, 7, 8]  # the 8-word row without output passes
    assert kept.rows == 11
    assert dict(kept.skipped) == {
        "prompt under min_prompt_tokens=3": 2,
        "prompt over max_prompt_tokens=8": 2,
        "output over max_output_tokens=70": 1,
    }
    by_chars = filter_dataset(dataset, LengthFilter(min_prompt_chars=10, max_prompt_chars=19))
    assert [r.prompt_chars for r in by_chars.records] == [14, 19]  # "word word" = 9, 3 words = 14, 4 words = 19


def test_filters_that_leave_nothing_say_why(tmp_path: Path) -> None:
    dataset = _dataset(tmp_path)
    with pytest.raises(ConfigError) as info:
        filter_dataset(dataset, LengthFilter(min_prompt_chars=1000))
    assert str(info.value) == (
        f"{dataset.source}: no rows left after the length filters: all 11 usable rows filtered out "
        "(11 prompt under min_prompt_chars=1000)"
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"min_prompt_chars": -1}, r"min_prompt_chars must be a whole number >= 0 \(or unset\), got -1"),
        ({"max_prompt_tokens": 2.5}, "max_prompt_tokens must be a whole number >= 0"),
        ({"max_output_tokens": 0}, "max_output_tokens must be a whole number >= 1"),
        ({"min_prompt_tokens": True}, "got True"),
        ({"min_prompt_tokens": 9, "max_prompt_tokens": 3}, r"min_prompt_tokens \(9\) is above max_prompt_tokens"),
    ],
)
def test_invalid_filters_are_refused(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LengthFilter(**kwargs)  # type: ignore[arg-type]


# --- sampling -----------------------------------------------------------------------------------------------


def test_sampling_is_seeded_and_without_replacement_by_default(tmp_path: Path) -> None:
    dataset = read_dataset(_jsonl(tmp_path, [{"prompt": f"p{i}"} for i in range(50)]))
    one = sample_dataset(dataset, 20, seed=7)
    assert one == sample_dataset(dataset, 20, seed=7)
    assert one.records != sample_dataset(dataset, 20, seed=8).records
    assert len({r.row for r in one.records}) == 20
    assert [r.row for r in one.records] != sorted(r.row for r in one.records)  # shuffled, not file order
    every = sample_dataset(dataset, 50, seed=7)
    assert sorted(r.row for r in every.records) == list(range(50))


def test_sampling_with_replacement_may_draw_more_than_there_are(tmp_path: Path) -> None:
    dataset = read_dataset(_jsonl(tmp_path, [{"prompt": f"p{i}"} for i in range(5)]))
    drawn = sample_dataset(dataset, 1000, seed=1, replace=True)
    counts = Counter(r.row for r in drawn.records)
    assert set(counts) == set(range(5))
    # Each row's count is Binomial(1000, 1/5): sd 12.6, so ±60 is 4.7σ (false alarm ~1e-5 over the 5 rows).
    assert all(abs(n - 200) <= 60 for n in counts.values()), counts
    with pytest.raises(ConfigError, match="cannot sample 6 rows without replacement: only 5 usable row"):
        sample_dataset(dataset, 6, seed=1)
    with pytest.raises(ValueError, match="the sample size must be a whole number >= 1, got 0"):
        sample_dataset(dataset, 0, seed=1)


def test_load_dataset_reads_filters_and_samples(tmp_path: Path) -> None:
    path = _jsonl(tmp_path, [{"prompt": " ".join(["w"] * n)} for n in range(1, 31)])
    dataset = load_dataset(path, LengthFilter(max_prompt_tokens=20), n=5, seed=3)
    assert len(dataset.records) == 5 and all(r.prompt_words <= 20 for r in dataset.records)
    assert dataset.skipped == (("prompt over max_prompt_tokens=20", 10),)
    assert dataset == load_dataset(path, LengthFilter(max_prompt_tokens=20), n=5, seed=3)
    assert len(load_dataset(path).records) == 30


def test_records_are_frozen(tmp_path: Path) -> None:
    record = read_dataset(_jsonl(tmp_path, [{"prompt": "x"}])).records[0]
    with pytest.raises(AttributeError):
        record.prompt = "y"  # type: ignore[misc]
