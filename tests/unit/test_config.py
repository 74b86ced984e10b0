"""Scenario model, YAML loading and error reporting (paths, lines, plain messages), and durations."""

from __future__ import annotations

import textwrap
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loadgen.config.durations import format_duration, parse_duration
from loadgen.config.scenario import (
    SLO,
    ConfigError,
    ConfigIssue,
    Scenario,
    check_environment,
    load_scenario,
    missing_secrets,
    parse_scenario,
    scenario_json_schema,
    validate_scenario,
)
from loadgen.protocol.dialects import DIALECT_NAMES
from loadgen.registry import UnknownNameError

MINIMAL = """\
variants:
  - name: a
    base_url: http://127.0.0.1:8000/
    model: m
"""


def issues_of(text: str) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as info:
        parse_scenario(textwrap.dedent(text), "s.yaml")
    return info.value.issues


def one_issue(text: str) -> ConfigIssue:
    issues = issues_of(text)
    assert len(issues) == 1, issues
    return issues[0]


# --- durations ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (5, 5.0),
        (1.5, 1.5),
        ("250ms", 0.25),
        ("90s", 90.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1m30s", 90.0),
        ("1.5s", 1.5),
        ("1h2m3s4ms", 3723.004),
        ("30", 30.0),
        (" 10s ", 10.0),
        (0, 0.0),
    ],
)
def test_parse_duration(value: float | str, seconds: float) -> None:
    assert parse_duration(value) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["", "abc", "10", "-5s", -1, "5 s", "1s1m", "1m1m", "s", "1d", True, None, [1]])
def test_parse_duration_rejects(value: Any) -> None:
    if value == "10":
        assert parse_duration(value) == 10.0
        return
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


def test_duration_error_says_the_expected_form() -> None:
    with pytest.raises(ValueError, match="'250ms'"):
        parse_duration("soon")


@pytest.mark.parametrize("seconds", [0, 0.25, 1.5, 59, 90, 3600, 3723.004])
def test_format_duration_round_trips(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


# --- defaults and the happy path -----------------------------------------------------------------------------


def test_defaults() -> None:
    scenario = parse_scenario(MINIMAL)
    variant = scenario.variants[0]
    assert variant.base_url == "http://127.0.0.1:8000"  # trailing slash dropped
    assert variant.dialect == "openai-chat"
    assert variant.api_key_env is None and variant.headers == {}
    assert (variant.connect_timeout, variant.read_timeout, variant.request_timeout) == (10.0, 60.0, 600.0)
    assert not variant.continuous_usage_stats and not variant.baseline and variant.weight == 1.0
    assert [(m.name, m.weight) for m in scenario.traffic.mixes] == [("chat", 1.0)]
    assert scenario.traffic.custom_mixes == {}
    load = scenario.load
    assert (load.users, load.spawn_rate, load.duration, load.warmup, load.think_time) == (16, 16.0, 60.0, 0.0, 0.0)
    assert scenario.slos == [
        SLO(metric="ttft", stat="p99", max_ms=3000),
        SLO(metric="e2e", stat="p99", max_ms=10000),
        SLO(metric="success_rate", min_percent=99),
    ]
    assert (scenario.name, scenario.seed, scenario.report_dir) == ("scenario", 0, "loadgen-report")
    assert scenario.baseline_variant is variant


def test_durations_are_seconds_and_baseline_lookup() -> None:
    scenario = parse_scenario(
        MINIMAL
        + """\
    connect_timeout: 250ms
    read_timeout: 1m30s
  - name: b
    base_url: https://b.example
    model: m
    baseline: true
load: {duration: 2m, warmup: 10s, think_time: 1.5}
slos: []
"""
    )
    assert scenario.variants[0].connect_timeout == 0.25
    assert scenario.variants[0].read_timeout == 90.0
    assert (scenario.load.duration, scenario.load.warmup, scenario.load.think_time) == (120.0, 10.0, 1.5)
    assert scenario.baseline_variant.name == "b"
    assert scenario.variant("a").base_url == "http://127.0.0.1:8000"
    assert scenario.slos == []
    with pytest.raises(UnknownNameError, match=r"Available variants: \['a', 'b'\]"):
        scenario.variant("zz")


@pytest.mark.parametrize("name", ["demo.yaml", "scenario.yaml"])
def test_examples_load(name: str) -> None:
    path = Path(str(resources.files("loadgen") / "examples" / name))
    scenario = load_scenario(path)
    assert scenario.variants


def test_demo_example() -> None:
    scenario = load_scenario(Path(str(resources.files("loadgen") / "examples" / "demo.yaml")))
    assert [v.name for v in scenario.variants] == ["baseline", "int8", "spec-decode"]
    assert scenario.baseline_variant.name == "baseline"
    assert all(v.continuous_usage_stats and v.model == "loadgen-sim" for v in scenario.variants)
    assert [m.weight for m in scenario.traffic.mixes] == [0.5, 0.25, 0.25]
    assert (scenario.load.users, scenario.load.duration, scenario.load.warmup) == (24, 60.0, 10.0)


# --- errors: path, line, plain message ----------------------------------------------------------------------


def test_unknown_top_level_key() -> None:
    issue = one_issue(MINIMAL + "colour: blue\n")
    assert (issue.path, issue.line) == ("colour", 5)
    assert issue.message.startswith("unknown field 'colour' (known: name, seed, variants, traffic, load, slos")


def test_unknown_nested_key_lists_that_models_fields() -> None:
    issue = one_issue(MINIMAL + "load:\n  user: 3\n")
    assert (issue.path, issue.line) == ("load.user", 6)
    known = (
        "users, spawn_rate, duration, warmup, stages, think_time, arrival, overflow, drain, latency_from, "
        "max_not_sent_percent, sequential, sequential_pause"
    )
    assert f"(known: {known})" in issue.message


def test_wrong_type_nested_in_second_variant() -> None:
    text = MINIMAL + "  - name: b\n    base_url: http://b\n    model: m\n    weight: heavy\n"
    issue = one_issue(text)
    assert (issue.path, issue.line) == ("variants[1].weight", 8)
    assert issue.message == "expected a number, got 'heavy'"


def test_unknown_dialect_lists_known_ones() -> None:
    issue = one_issue(MINIMAL + "    dialect: tgi2\n")
    assert (issue.path, issue.line) == ("variants[0].dialect", 5)
    assert issue.message == f"dialect 'tgi2' is not registered. Available dialects: {sorted(DIALECT_NAMES)}"


def test_rendered_error_line() -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(MINIMAL + "    dialect: tgi2\n", "scenario.yaml")
    assert str(info.value) == (
        "scenario.yaml:5: variants[0].dialect: dialect 'tgi2' is not registered. "
        f"Available dialects: {sorted(DIALECT_NAMES)}"
    )
    assert info.value.exit_code == 2


def test_unknown_mix_lists_known_ones() -> None:
    text = MINIMAL + textwrap.dedent(
        """\
        traffic:
          mixes:
            - {name: chat}
            - {name: chatt}
          custom_mixes:
            mine: {buckets: [{name: b, prompt_tokens: [10, 20]}], output_tokens: [1, 5]}
        """
    )
    issue = one_issue(text)
    assert (issue.path, issue.line) == ("traffic.mixes[1].name", 8)
    assert issue.message == "mix 'chatt' is not registered. Available mixs: ['agent', 'chat', 'code', 'mine', 'rag']"


def test_duplicate_variant_names() -> None:
    issue = one_issue(MINIMAL + "  - name: a\n    base_url: http://b\n    model: m\n")
    assert (issue.path, issue.line) == ("variants[1].name", 5)
    assert "defined twice" in issue.message


def test_two_baselines() -> None:
    text = MINIMAL + "    baseline: true\n  - name: b\n    base_url: http://b\n    model: m\n    baseline: true\n"
    issue = one_issue(text)
    assert (issue.path, issue.line) == ("variants[1].baseline", 9)


def test_warmup_not_shorter_than_duration() -> None:
    issue = one_issue(MINIMAL + "load:\n  duration: 30s\n  warmup: 30s\n")
    assert (issue.path, issue.line) == ("load.warmup", 7)
    assert "shorter than the duration" in issue.message


def test_authorization_header_points_to_api_key_env() -> None:
    issue = one_issue(MINIMAL + "    headers:\n      authorization: Bearer sk-secret\n")
    assert (issue.path, issue.line) == ("variants[0].headers.authorization", 6)
    assert "api_key_env" in issue.message and "sk-secret" not in issue.message


def test_secrets_are_not_echoed() -> None:
    issue = one_issue(MINIMAL + "    api_key_env: sk-abc123\n")
    assert issue.path == "variants[0].api_key_env" and "sk-abc123" not in issue.message
    issue = one_issue(MINIMAL + "    headers: 'Authorization: Bearer sk-abc123'\n")
    assert issue.message == "expected a mapping, got a string"
    issue = one_issue(MINIMAL.replace("http://127", "http://u:sk-abc123@127"))
    assert "sk-abc123" not in issue.message


def test_missing_key_points_at_parent_mapping() -> None:
    issue = one_issue("variants:\n  - name: a\n    base_url: http://x:1\n")
    assert (issue.path, issue.line, issue.message) == ("variants[0].model", 2, "required field is missing")


@pytest.mark.parametrize(
    ("extra", "path", "fragment"),
    [
        ("    base_url: ftp://x\n", "variants[0].base_url", "http:// or https://"),
        ("    name: -bad\n", "variants[0].name", "letters, digits"),
        ("    dialect: 3\n", "variants[0].dialect", "expected a string, got 3"),
        ("    weight: 0\n", "variants[0].weight", "greater than 0"),
        ("    baseline: maybe\n", "variants[0].baseline", "true or false"),
        ("    read_timeout: soon\n", "variants[0].read_timeout", "invalid duration 'soon'"),
        ("    connect_timeout: 0\n", "variants[0].connect_timeout", "greater than 0"),
        ("    headers: {'bad header': x}\n", "variants[0].headers['bad header']", "not a valid HTTP header"),
        ("load: {users: 0}\n", "load.users", "at least 1"),
        ("load: {users: 2.5}\n", "load.users", "whole number"),
        ("load: {users: true}\n", "load.users", "whole number"),
        ("load: {spawn_rate: -1}\n", "load.spawn_rate", "greater than 0"),
        ("load: {duration: 0}\n", "load.duration", "greater than 0"),
        ("load: {think_time: -1s}\n", "load.think_time", "negative"),
        ("slos: [{metric: ttfb, stat: p99, max_ms: 1}]\n", "slos[0].metric", "expected one of"),
        ("slos: [{metric: ttft, stat: p42, max_ms: 1}]\n", "slos[0].stat", "expected one of"),
        ("slos: [{metric: ttft, stat: p99, max_ms: .nan}]\n", "slos[0].max_ms", "finite"),
        ("slos: [{metric: ttft, stat: p99, max_ms: 1, variant: zz}]\n", "slos[0].variant", "Available variants"),
        ("slos: [{metric: ttft, stat: p99, max_ms: 1, mix: rag}]\n", "slos[0].mix", "not in traffic.mixes"),
        ("slos: [{metric: queue_delay, stat: p99, max_ms: 1}]\n", "slos[0].metric", "set load.arrival"),
        ("traffic: {mixes: []}\n", "traffic.mixes", "at least 1"),
        ("traffic: {mixes: [{name: chat}, {name: chat}]}\n", "traffic.mixes[1].name", "listed twice"),
        ("traffic: {mixes: [{name: chat, weight: 0}]}\n", "traffic.mixes[0].weight", "greater than 0"),
        ("seed: -1\n", "seed", "at least 0"),
        ("variants: []\n", "variants", "at least 1"),
    ],
)
def test_validation_rules(extra: str, path: str, fragment: str) -> None:
    # Overrides merged into a valid scenario, so each case has exactly one problem (and no duplicate keys).
    document: dict[str, Any] = yaml.safe_load(MINIMAL)
    override = yaml.safe_load(extra.strip())
    if extra.startswith("    "):
        document["variants"][0].update(override)
    else:
        document.update(override)
    issues = issues_of(yaml.safe_dump(document))
    assert [i.path for i in issues] == [path], issues
    assert fragment in issues[0].message


CUSTOM = MINIMAL + "traffic:\n  mixes: [{name: mine}]\n  custom_mixes:\n    {name}: {body}\n"


@pytest.mark.parametrize(
    ("name", "body", "path", "fragment"),
    [
        ("chat", "{buckets: [{name: b, prompt_tokens: [5, 9]}], output_tokens: [1, 2]}", "chat", "built-in"),
        ("mine", "{buckets: [], output_tokens: [1, 2]}", "mine.buckets", "at least 1"),
        ("mine", "{buckets: [{name: b, prompt_tokens: [9, 5]}], output_tokens: [1, 2]}", "mine.buckets[0]", "min <="),
        ("mine", "{buckets: [{name: b, prompt_tokens: [0, 5]}], output_tokens: [1, 2]}", "mine.buckets[0]", ">= 1"),
        ("mine", "{buckets: [{name: b, prompt_tokens: [5]}], output_tokens: [1, 2]}", "mine.buckets[0]", "[5]"),
        ("mine", "{buckets: [{name: b, prompt_tokens: [5, 9]}], output_tokens: 3}", "mine.output_tokens", "[min"),
        (
            "mine",
            "{buckets: [{name: b, prompt_tokens: [5, 9]}], output_tokens: [1, 2], system_prompt_tokens: 5}",
            "mine.system_prompt_tokens",
            "shortest bucket",
        ),
        (
            "mine",
            "{buckets: [{name: b, prompt_tokens: [5, 9]}, {name: b, prompt_tokens: [5, 9]}], output_tokens: [1, 2]}",
            "mine.buckets[1].name",
            "defined twice",
        ),
    ],
)
def test_custom_mix_rules(name: str, body: str, path: str, fragment: str) -> None:
    issues = issues_of(CUSTOM.replace("{name}", name).replace("{body}", body))
    assert any(i.path.startswith(f"traffic.custom_mixes.{path}") and fragment in i.message for i in issues), issues
    assert all(i.line == 8 for i in issues if i.path.startswith("traffic.custom_mixes"))


def test_custom_mix_is_usable() -> None:
    body = "{buckets: [{name: b, prompt_tokens: [5, 9]}], output_tokens: [1, 2], system_prompt_tokens: 4}"
    scenario = parse_scenario(CUSTOM.replace("{name}", "mine").replace("{body}", body))
    assert scenario.traffic.custom_mixes["mine"].buckets[0].prompt_tokens == (5, 9)


def test_all_issues_reported_in_file_order() -> None:
    text = "name: x\nvariants:\n  - name: a\n    base_url: nope\n    model: m\nload: {users: 0}\nbogus: 1\n"
    assert [(i.line, i.path) for i in issues_of(text)] == [
        (4, "variants[0].base_url"),
        (6, "load.users"),
        (7, "bogus"),
    ]


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        ("", 1, "empty"),
        ("# only a comment\n", 1, "empty"),
        ("- a\n- b\n", 1, "got ['a', 'b']"),
        ("just text", 1, "got 'just text'"),
        ("variants:\n  - name: a\n    base_url: [\n", 4, "invalid YAML"),
        ("a: 1\n b: 2\n", 2, "invalid YAML"),
        (MINIMAL + "name: x\nname: y\n", 6, "duplicate key 'name'"),
    ],
)
def test_file_level_problems(text: str, line: int, fragment: str) -> None:
    issue = one_issue(text)
    assert issue.line == line and fragment in issue.message, issue


def test_load_scenario_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_scenario(tmp_path / "missing.yaml")
    assert str(info.value) == f"{tmp_path / 'missing.yaml'}: file not found"
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"name: \xff\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        load_scenario(bad)
    good = tmp_path / "good.yaml"
    good.write_text(MINIMAL)
    assert load_scenario(str(good)).variants[0].name == "a"


def test_validate_scenario_dict_has_paths_without_lines() -> None:
    data = yaml.safe_load(MINIMAL)
    data["load"] = {"users": "many"}
    with pytest.raises(ConfigError) as info:
        validate_scenario(data, "cli")
    assert str(info.value) == "cli: load.users: expected a whole number, got 'many'"


def test_json_schema_is_strict_and_described() -> None:
    schema = scenario_json_schema()
    assert schema["additionalProperties"] is False
    for name, definition in schema["$defs"].items():
        assert definition["additionalProperties"] is False, name
        for field, spec in definition["properties"].items():
            assert spec.get("description"), f"{name}.{field}"
    assert set(schema["required"]) == {"variants"}


# --- robustness: nothing but ConfigError escapes -------------------------------------------------------------

_FIELD_NAMES = sorted(
    {"variants", "traffic", "load", "slos", "mixes", "custom_mixes", "buckets", "name", "base_url", "model"}
    | {"headers", "weight", "duration", "warmup", "prompt_tokens", "output_tokens", "metric", "stat", "max_ms"}
)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(["chat", "http://x", "10s", "-1", "openai-chat", "p99", "ttft"]),
)
_documents = st.recursive(
    _scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(_FIELD_NAMES), st.text(max_size=6)), children, max_size=5),
    ),
    max_leaves=25,
)


def _check_only_config_errors(text: str) -> None:
    try:
        result = parse_scenario(text)
    except ConfigError as exc:
        assert exc.issues and str(exc)
    else:
        assert isinstance(result, Scenario)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents)
def test_arbitrary_documents_raise_only_config_error(document: Any) -> None:
    _check_only_config_errors(yaml.safe_dump(document))


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}\n #&*!|>'\"?,.0129\t%@`\\\x00")), max_size=60))
def test_arbitrary_text_raises_only_config_error(text: str) -> None:
    _check_only_config_errors(text)


@pytest.mark.parametrize(
    "text",
    ["a: &x [*x]\n", "variants: &v [*v]\n", "[" * 3000, "!!binary 'AAAA'\n", "? [a]\n: 1\n", "x: !!set {a, b}\n"],
)
def test_pathological_yaml(text: str) -> None:
    _check_only_config_errors(text)


# --- the environment a run needs ------------------------------------------------------------------------------

KEYED = """\
variants:
  - {name: a, base_url: "http://127.0.0.1:8000", model: m}
  - {name: b, base_url: "http://127.0.0.1:8001", model: m, api_key_env: KEY_B}
  - {name: c, base_url: "http://127.0.0.1:8002", model: m, api_key_env: KEY_C}
"""


def test_missing_secrets_name_field_and_variable_never_a_value() -> None:
    scenario = parse_scenario(KEYED)
    issues = missing_secrets(scenario, {"KEY_B": "", "KEY_C": "sk-live-123", "OTHER": "x"})
    assert [i.path for i in issues] == ["variants[1].api_key_env"]
    assert "KEY_B is empty" in issues[0].message and "variant 'b'" in issues[0].message
    issues = missing_secrets(scenario, {})
    assert [(i.path, "is not set" in i.message) for i in issues] == [
        ("variants[1].api_key_env", True),
        ("variants[2].api_key_env", True),
    ]
    assert missing_secrets(scenario, {"KEY_B": "k", "KEY_C": "k"}) == []
    with pytest.raises(ConfigError) as info:
        check_environment(scenario, "s.yaml", {"KEY_B": "sk-live-123"})
    assert info.value.exit_code == 2
    text = str(info.value)
    assert text.startswith("s.yaml: variants[2].api_key_env: environment variable KEY_C is not set")
    assert "sk-live-123" not in text


def test_missing_secrets_reads_the_process_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    scenario = parse_scenario(KEYED)
    monkeypatch.setenv("KEY_B", "k")
    monkeypatch.delenv("KEY_C", raising=False)
    assert [i.path for i in missing_secrets(scenario)] == ["variants[2].api_key_env"]
    monkeypatch.setenv("KEY_C", "k")
    check_environment(scenario)  # raises nothing once both are set
