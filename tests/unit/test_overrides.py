"""`--set key.path=value`: parsed as YAML, applied to the raw document before validation, validated like the file;
every problem names the flag and the field path (exit 2), and the preflight step's problems in an overridden field
name the flag too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loadgen.cli import main
from loadgen.config import ConfigError, parse_document, parse_override
from loadgen.config.overrides import apply_overrides
from loadgen.preflight import checked

SCENARIO = """\
name: t
variants:
  - {name: a, base_url: "http://127.0.0.1:9", model: m}
  - name: b
    base_url: "http://127.0.0.1:10"
    model: m
load: {users: 4, duration: 10s}
"""


def _with(*sets: str) -> Any:
    return parse_document(SCENARIO, "s.yaml").with_overrides([parse_override(s) for s in sets])


def _issues(*sets: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        _with(*sets).validate()
    assert info.value.exit_code == 2
    return [issue.render("s.yaml") for issue in info.value.issues]


@pytest.mark.parametrize(
    ("text", "keys", "value"),
    [
        ("load.users=64", ("load", "users"), 64),
        ("load.duration=30s", ("load", "duration"), "30s"),
        ("variants.0.base_url=http://h:8000", ("variants", "0", "base_url"), "http://h:8000"),
        ("traffic.mixes=[{name: chat, weight: 2}]", ("traffic", "mixes"), [{"name": "chat", "weight": 2}]),
        ("tokenizer=", ("tokenizer",), None),
        ("load.sequential=true", ("load", "sequential"), True),
        ("name=a=b", ("name",), "a=b"),  # the first '=' splits
    ],
)
def test_the_value_is_yaml(text: str, keys: tuple[str, ...], value: Any) -> None:
    override = parse_override(text)
    assert (override.keys, override.value) == (keys, value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("load.users", "expected key.path=value"), ("=3", "expected key.path=value"), ("load..users=3", "empty segment")],
)
def test_a_malformed_flag_is_refused_naming_it(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_override(text)
    assert fragment in str(info.value) and str(info.value).startswith("--set ")


def test_a_value_that_is_not_yaml_is_refused_without_echoing_it() -> None:
    with pytest.raises(ConfigError) as info:
        parse_override("variants.0.headers={X-Key: sk-secret-1")
    assert "--set variants.0.headers" in str(info.value) and "not valid YAML" in str(info.value)
    assert "sk-secret" not in str(info.value)


def test_overrides_change_the_validated_scenario() -> None:
    sc = _with(
        "load.users=64",
        "load.duration=1m",
        "variants.b.model=other",  # by name
        "variants.0.weight=3",  # by index
        "slos=[{metric: ttft, stat: p99, max_ms: 900}]",
        "slos.0.max_ms=250",
        "traffic.mixes=[{name: chat, weight: 2}, {name: rag}]",
        "metrics.prometheus.url=http://p:9090",  # mappings on the way are created
        "metrics.prometheus.queries={util: up}",
    ).validate()
    assert (sc.load.users, sc.load.duration) == (64, 60.0)
    assert [v.model for v in sc.variants] == ["m", "other"] and sc.variants[0].weight == 3
    assert sc.slos[0].max_ms == 250
    assert [(m.name, m.weight) for m in sc.traffic.mixes] == [("chat", 2), ("rag", 1.0)]
    assert sc.metrics.prometheus is not None and sc.metrics.prometheus.queries == {"util": "up"}


def test_the_last_of_two_flags_wins_and_the_document_is_left_as_it_was() -> None:
    doc = parse_document(SCENARIO, "s.yaml")
    before = json.dumps(doc.data)
    assert (
        doc.with_overrides([parse_override("load.users=8"), parse_override("load.users=16")]).validate().load.users
        == 16
    )
    assert json.dumps(doc.data) == before


def test_yaml_aliases_are_not_changed_through_each_other() -> None:
    data = {"a": {"x": 1}}
    data["b"] = data["a"]  # what an anchor and an alias construct
    out, _ = apply_overrides(data, [parse_override("b.x=2")], "s.yaml")
    assert out["a"] == {"x": 1} and out["b"] == {"x": 2} and data["b"] == {"x": 1}


def test_validation_errors_name_the_flag_and_the_field_without_a_file_line() -> None:
    issues = _issues("load.users=0", "load.userz=3", "variants.1.base_url=ftp://x")
    assert "s.yaml: load.users: must be at least 1, got 0 (--set load.users)" in issues
    assert any(
        i.startswith("s.yaml: load.userz: unknown field 'userz'") and i.endswith("(--set load.userz)") for i in issues
    )
    assert any(
        i.startswith("s.yaml: variants[1].base_url: expected an http") and "(--set variants.1.base_url)" in i
        for i in issues
    )


def test_a_problem_in_the_file_keeps_its_line_beside_an_override() -> None:
    doc = parse_document(SCENARIO.replace("model: m}", "model: m, dialect: tgi2}"), "s.yaml")
    with pytest.raises(ConfigError) as info:
        doc.with_overrides([parse_override("load.users=0")]).validate()
    rendered = [i.render("s.yaml") for i in info.value.issues]
    assert any(r.startswith("s.yaml:3: variants[0].dialect:") for r in rendered), rendered
    assert "s.yaml: load.users: must be at least 1, got 0 (--set load.users)" in rendered


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("variants.c.model=x", "s.yaml: variants: has no item named 'c' (names: a, b) (--set variants.c.model)"),
        ("variants.2.model=x", "s.yaml: variants: has 2 item(s), none at index 2"),
        ("load.users.max=3", "s.yaml: load.users: is a single value, not a mapping or a list (--set load.users.max)"),
        ("slos.0.max_ms=3", "s.yaml: slos: is not in the scenario, so it has no item 0: set the whole list"),
    ],
)
def test_a_path_that_cannot_be_followed_is_refused_naming_it(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        _with(text)
    assert str(info.value).startswith(expected), str(info.value)


def test_the_preflight_step_names_the_flag_of_an_overridden_field(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    doc = _with(f"traffic.dataset.path={missing}")
    with pytest.raises(ConfigError) as info:
        checked(doc)
    [issue] = info.value.issues
    assert issue.path == "traffic.dataset.path" and issue.line is None
    assert "cannot read the dataset" in issue.message and issue.message.endswith("(--set traffic.dataset.path)")


def test_validate_takes_set_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    assert main(["validate", str(path), "--set", "load.users=64", "--set", "load.duration=2m"]) == 0
    out = capsys.readouterr().out
    assert "with --set load.users, --set load.duration: OK" in out and "64 users for 120s" in out
    assert main(["validate", str(path), "--set", "load.users=none"]) == 2
    assert "load.users: expected a whole number, got 'none' (--set load.users)" in capsys.readouterr().err


def test_run_refuses_a_bad_set_before_writing_or_starting_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + f"report_dir: {tmp_path / 'out'}\n", encoding="utf-8")
    assert main(["run", str(path), "--workers", "0", "--set", "load.users=1"]) == 2
    assert "load.users >= 2) (--set load.users)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_sweep_takes_set_flags_and_refuses_a_bad_one_before_load(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO + f"report_dir: {tmp_path / 'out'}\n", encoding="utf-8")
    assert main(["sweep", str(path), "--rates", "1,2", "--set", "variants.b.dialect=tgi2"]) == 2
    assert "variants[1].dialect:" in (err := capsys.readouterr().err) and "(--set variants.b.dialect)" in err
    assert not (tmp_path / "out").exists()


def test_run_checks_duration_against_the_scenario_before_any_process_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        SCENARIO.replace("duration: 10s", "duration: 20s, warmup: 5s") + f"report_dir: {tmp_path / 'out'}\n"
    )
    assert main(["run", str(path), "--workers", "0", "--duration", "2s"]) == 2
    assert "load.warmup: warm-up (5s) must be shorter than the duration (2s)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused here, not in a Locust process's log
