"""traffic.dataset: a scenario replays a dataset file as a mix. Every file is written by the test into tmp_path."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from loadgen.config.scenario import ConfigError, Scenario
from loadgen.preflight import parse_checked
from loadgen.protocol.dialects import get_dialect
from loadgen.traffic.sampler import RequestSpec, length_class, sampler_for

VARIANTS = [
    {"name": "a", "base_url": "http://127.0.0.1:1", "model": "m"},
    {"name": "b", "base_url": "http://127.0.0.1:2", "model": "m"},
]


def _jsonl(path: Path, rows: Sequence[object]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _rows(n: int) -> list[dict[str, Any]]:
    # Row k: a prompt of k + 1 words opening with its tag, and k + 10 output tokens.
    return [{"prompt": " ".join([f"row{k}"] + ["w"] * k), "output_tokens": k + 10} for k in range(n)]


def _scenario(traffic: dict[str, Any], **over: Any) -> Scenario:
    doc = {"seed": 11, "variants": VARIANTS, "traffic": traffic, **over}
    # Read as every command reads it: the model, then the preflight step that reads the file.
    return parse_checked(yaml.safe_dump(doc, sort_keys=False), "s.yaml")


def _issues(traffic: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        _scenario(traffic)
    return [(issue.path, issue.message) for issue in info.value.issues]


def _row_of(spec: RequestSpec) -> int:
    return int(spec.prompt.split()[0].removeprefix("row"))


# --- the request stream ------------------------------------------------------------------------------------


def test_a_dataset_alone_replaces_the_default_mix_and_rows_come_in_a_seeded_order(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", _rows(50))
    scenario = _scenario({"dataset": {"path": str(path)}})
    assert [ref.name for ref in scenario.traffic.mixes] == ["dataset"]
    sampler = sampler_for(scenario, 0)
    specs = [sampler.spec_at(i) for i in range(100)]
    order = [_row_of(s) for s in specs]
    # Every row once per pass, in one seeded order (not file order), then again in the same order.
    assert sorted(order[:50]) == list(range(50)) and order[50:] == order[:50] and order[:50] != list(range(50))
    for spec in specs:
        k = _row_of(spec)
        assert spec.mix == "dataset" and spec.bucket == "short"
        assert spec.max_tokens == k + 10 and spec.prompt_tokens == k + 1 and spec.system_prompt == ""
        assert spec.messages is None
    # The same scenario (as another variant's user, worker or run sees it) gives the same order...
    again = sampler_for(_scenario({"dataset": {"path": str(path)}}), 0)
    assert [_row_of(again.next()) for _ in range(100)] == order
    # ...another stream walks the same cycle from another row; another seed is another order.
    other = [_row_of(sampler.with_stream(3).spec_at(i)) for i in range(50)]
    start = order.index(other[0])
    assert other == (order[start:50] + order[:start])[:50] and start != 0
    reseeded = sampler_for(_scenario({"dataset": {"path": str(path)}}, seed=12), 0)
    assert [_row_of(reseeded.spec_at(i)) for i in range(50)] != order[:50]


def test_sample_replace_and_the_default_output_length(tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = _rows(20)
    for row in rows[::2]:
        del row["output_tokens"]
    path = _jsonl(tmp_path / "d.jsonl", rows)
    dataset = {"path": str(path), "sample": 5, "default_output_tokens": 99}
    sampler = sampler_for(_scenario({"dataset": dataset}), 0)
    order = [_row_of(sampler.spec_at(i)) for i in range(15)]
    assert len(set(order[:5])) == 5 and order[5:10] == order[:5]
    for i in range(15):
        spec = sampler.spec_at(i)
        assert spec.max_tokens == (99 if _row_of(spec) % 2 == 0 else _row_of(spec) + 10)
    drawn = sampler_for(_scenario({"dataset": {**dataset, "sample": 60, "replace": True}}), 0)
    counts = Counter(_row_of(drawn.spec_at(i)) for i in range(60))
    assert max(counts.values()) > 1  # with replacement: 60 draws of 20 rows repeat some


def test_filters_keep_the_rows_inside_the_bounds(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", _rows(40))
    dataset = {"path": str(path), "min_prompt_tokens": 5, "max_prompt_tokens": 20, "max_output_tokens": 25}
    sampler = sampler_for(_scenario({"dataset": dataset}), 0)
    seen = {_row_of(sampler.spec_at(i)) for i in range(200)}
    assert seen == set(range(4, 16))  # 5..20 words, output (k + 10) <= 25


def test_chat_rows_keep_their_messages_and_lengths_give_the_bucket(tmp_path: Path) -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Summarise this."},
        {"role": "assistant", "content": "Sure."},
        {"role": "user", "content": " ".join(["word"] * 300)},
    ]
    sharegpt = {"conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "a b c d"}]}
    path = _jsonl(tmp_path / "d.jsonl", [{"messages": messages, "output_tokens": 5}, sharegpt])
    sampler = sampler_for(_scenario({"dataset": {"path": str(path), "name": "chats"}}), 0)
    specs = {spec.max_tokens: spec for spec in (sampler.spec_at(i) for i in range(2))}
    long, short = specs[5], specs[4]  # the ShareGPT row asks for its reply's 4 words
    assert long.mix == "chats" and long.bucket == "medium" and long.prompt_tokens == 2 + 2 + 1 + 300
    assert long.messages is not None and list(long.messages) == messages
    assert short.messages == ({"role": "user", "content": "hi there"},) and short.bucket == "short"
    chat = orjson.loads(get_dialect("openai-chat").build_body(long, "m", False))
    assert chat["messages"] == messages and chat["max_tokens"] == 5
    raw = orjson.loads(get_dialect("openai-completions").build_body(long, "m", False))
    assert raw["prompt"].startswith("Be brief. Summarise this.\nSure.\nword") and raw["prompt"].count("word") == 300
    assert [length_class(n) for n in (1, 200, 201, 1000, 4000, 4001)] == [
        "short",
        "short",
        "medium",
        "medium",
        "long",
        "xlong",
    ]


def test_a_dataset_as_one_of_the_mixes(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", _rows(10))
    traffic = {
        "mixes": [{"name": "chat", "weight": 1}, {"name": "dataset", "weight": 3}],
        "dataset": {"path": str(path)},
    }
    sampler = sampler_for(_scenario(traffic), 0)
    mixes = Counter(sampler.spec_at(i).mix for i in range(2000))
    assert set(mixes) == {"chat", "dataset"} and 0.7 < mixes["dataset"] / 2000 < 0.8


def test_a_relative_path_resolves_against_the_working_directory(tmp_path: Path, monkeypatch: Any) -> None:
    (tmp_path / "data").mkdir()
    _jsonl(tmp_path / "data" / "d.jsonl", _rows(3))
    monkeypatch.chdir(tmp_path)
    sampler = sampler_for(_scenario({"dataset": {"path": "data/d.jsonl"}}), 0)
    assert {_row_of(sampler.spec_at(i)) for i in range(3)} == {0, 1, 2}


# --- errors when the scenario loads --------------------------------------------------------------------------


def test_a_malformed_row_names_the_field_file_line_and_row_field(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [*_rows(3), {"messages": [{"role": "bot", "content": "x"}]}])
    ((where, message),) = _issues({"dataset": {"path": str(path)}})
    assert where == "traffic.dataset.path"
    assert message == f"{path}:4: messages[0].role: expected one of system, user, assistant, got 'bot'"
    with pytest.raises(ConfigError) as info:
        _scenario({"dataset": {"path": str(path)}})
    assert info.value.exit_code == 2 and "s.yaml:" in str(info.value)


def test_a_missing_file_is_an_error_on_the_path(tmp_path: Path) -> None:
    ((where, message),) = _issues({"dataset": {"path": str(tmp_path / "nope.jsonl")}})
    assert where == "traffic.dataset.path" and "cannot read the dataset" in message


@pytest.mark.parametrize(
    ("dataset", "mixes", "where", "fragment"),
    [
        ({}, None, "traffic.dataset.default_output_tokens", "d.jsonl:1 gives no output_tokens"),
        ({"sample": 5, "default_output_tokens": 8}, None, "traffic.dataset.sample", "cannot sample 5 rows"),
        ({"replace": True, "default_output_tokens": 8}, None, "traffic.dataset.replace", "applies with sample only"),
        ({"min_prompt_tokens": 9, "max_prompt_tokens": 2}, None, "traffic.dataset.min_prompt_tokens", "no row"),
        ({"min_prompt_tokens": 50, "default_output_tokens": 8}, None, "traffic.dataset.path", "no rows left"),
        ({"name": "rag", "default_output_tokens": 8}, None, "traffic.dataset.name", "already a mix"),
        ({"default_output_tokens": 8}, [{"name": "chat"}], "traffic.dataset", "add {name: dataset} to traffic.mixes"),
        ({"default_output_tokens": 0}, None, "traffic.dataset.default_output_tokens", "at least 1"),
        ({"default_output_tokens": 8, "format": "sharegpt"}, None, "traffic.dataset.format", ""),
    ],
)
def test_config_errors_name_the_field(
    tmp_path: Path, dataset: dict[str, Any], mixes: list[dict[str, Any]] | None, where: str, fragment: str
) -> None:
    path = _jsonl(tmp_path / "d.jsonl", [{"prompt": "one two"}, {"prompt": "three four five"}])
    traffic: dict[str, Any] = {"dataset": {"path": str(path), **dataset}}
    if mixes is not None:
        traffic["mixes"] = mixes
    issues = _issues(traffic)
    assert any(w == where and fragment in m for w, m in issues), issues


def test_an_slo_may_name_the_dataset_mix(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "d.jsonl", _rows(3))
    slos = [{"metric": "ttft", "stat": "p99", "max_ms": 100, "mix": "sharegpt"}]
    scenario = _scenario({"dataset": {"path": str(path), "name": "sharegpt"}}, slos=slos)
    assert scenario.slos[0].mix == "sharegpt"
