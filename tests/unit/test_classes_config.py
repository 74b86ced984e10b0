"""Priority classes, configuration and draw: `traffic.classes` and an SLO's `class`, each mistake named at its
field (exit 2 before any load); the seeded class draw, its shares, and the pairing it leaves untouched."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from loadgen.config.errors import ConfigError
from loadgen.config.scenario import Scenario, parse_scenario
from loadgen.exit_codes import ExitCode
from loadgen.traffic.mixes import builtin_mixes
from loadgen.traffic.sampler import RequestSampler, sampler_for
from loadgen.traffic.sessions import Conversation

VARIANTS = """\
variants:
  - {name: a, base_url: "http://127.0.0.1:1", model: m}
  - {name: b, base_url: "http://127.0.0.1:2", model: m, dialect: tgi}
"""
CLASSES = """\
  classes:
    - {name: interactive, share: 3, priority: 0, headers: {X-Priority: high}}
    - {name: batch, priority: 10, headers: {X-Priority: low}}
    - {name: free}
"""


def _scenario(traffic: str = CLASSES, rest: str = "", seed: int = 11) -> Scenario:
    return parse_scenario(f"{VARIANTS}seed: {seed}\ntraffic:\n{traffic}{rest}", "s.yaml")


def _issues(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        parse_scenario(textwrap.dedent(text), "s.yaml")
    return {i.path: i.message for i in err.value.issues}


def test_classes_are_read_with_their_defaults() -> None:
    s = _scenario(rest="slos:\n  - {metric: ttft, stat: p99, max_ms: 500, class: interactive}\n")
    interactive, batch, free = s.traffic.classes
    assert (interactive.name, interactive.share, interactive.priority) == ("interactive", 3.0, 0)
    assert batch.headers == {"X-Priority": "low"} and batch.share == 1.0
    assert (free.priority, free.headers) == (None, {})
    assert s.slos[0].cls == "interactive"
    assert parse_scenario(VARIANTS).traffic.classes == []  # absent: one implicit class


@pytest.mark.parametrize(
    ("classes", "path", "words"),
    [
        ("[{name: x}, {name: x}]", "traffic.classes[1].name", "defined twice"),
        ("[{name: 'no spaces'}]", "traffic.classes[0].name", "names are 1-63 letters"),
        ("[{name: x, share: 0}]", "traffic.classes[0].share", "greater than 0"),
        ("[{name: x, share: .nan}]", "traffic.classes[0].share", "finite"),
        ("[{name: x, priority: 1.5}]", "traffic.classes[0].priority", "whole number"),
        ("[{name: x, priority: true}]", "traffic.classes[0].priority", "whole number"),
        ("[{name: x, priority: 9223372036854775808}]", "traffic.classes[0].priority", ""),
        ("[{name: x, headers: {Authorization: t}}]", "traffic.classes[0].headers.Authorization", "api_key_env"),
        ("[{name: x, headers: {'bad name': v}}]", "traffic.classes[0].headers['bad name']", "not a valid"),
        ("[{name: x, headers: {X-Request-Id: v}}]", "traffic.classes[0].headers.X-Request-Id", "writes"),
        ("[{name: x, headers: {Accept: v}}]", "traffic.classes[0].headers.Accept", "writes Accept"),
        ('[{name: x, headers: {X-P: "a\\nb"}}]', "traffic.classes[0].headers.X-P", "line breaks"),
        ("[{name: x, headers: {X-P: 'é'}}]", "traffic.classes[0].headers.X-P", "ASCII"),
        ("[{name: x, weight: 2}]", "traffic.classes[0].weight", "unknown field"),
    ],
)
def test_each_class_mistake_names_its_field(classes: str, path: str, words: str) -> None:
    issues = _issues(f"{VARIANTS}traffic:\n  classes: {classes}\n")
    assert path in issues and words in issues[path], issues


def test_mistakes_across_the_scenario_name_their_fields() -> None:
    text = f"""\
variants:
  - {{name: a, base_url: "http://127.0.0.1:1", model: m, headers: {{x-priority: v}}, extra_body: {{priority: 3}}}}
traffic:
{CLASSES}slos:
  - {{metric: ttft, stat: p99, max_ms: 5, class: nope}}
"""
    issues = _issues(text)
    assert "leave it out" in issues["variants[0].extra_body.priority"]
    assert "sets X-Priority too" in issues["traffic.classes[0].headers.X-Priority"]
    assert "sets X-Priority too" in issues["traffic.classes[1].headers.X-Priority"]
    assert "'nope' is not in traffic.classes: ['batch', 'free', 'interactive']" in issues["slos[0].class"]
    both = f"{VARIANTS}traffic:\n{CLASSES}slos:\n  - {{metric: ttft, stat: p99, max_ms: 5, class: batch, mix: chat}}\n"
    assert "not both" in _issues(both)["slos[0].class"]
    # Without classes, naming one is an error too; a variant's own priority is then its business.
    plain = f"{VARIANTS}slos:\n  - {{metric: e2e, stat: p50, max_ms: 9, class: default}}\n"
    assert "traffic.classes is not set" in _issues(plain)["slos[0].class"]
    assert parse_scenario(VARIANTS.replace("model: m}", "model: m, extra_body: {priority: 2}}", 1)).variants


def test_a_bad_class_is_exit_2_before_any_load(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(f"{VARIANTS}traffic:\n  classes: [{{name: x}}, {{name: x}}]\n", encoding="utf-8")
    # `run` against unreachable variants: the scenario is refused first, so nothing is ever sent.
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "run", str(path), "--quiet"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == ExitCode.USAGE == 2, proc.stderr
    assert "s.yaml:5: traffic.classes[1].name: class 'x' is defined twice" in proc.stderr


# --- the draw ---------------------------------------------------------------------------------------------------

# A class's count over N requests is binomial(N, share): outside 4.5 sigma with probability 6.8e-6 when the draw is
# right, so the three classes (and the per-mix check below) together raise a false alarm in under 1e-4 of seeds.
N = 10_000
SIGMAS = 4.5


def _within(count: int, n: int, p: float) -> bool:
    return abs(count - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p))


def test_class_shares_match_the_configured_shares() -> None:
    sampler = sampler_for(_scenario(), 0)
    counts = Counter(sampler.spec_at(i).priority_class for i in range(N))
    assert set(counts) == {"interactive", "batch", "free"}
    for name, p in (("interactive", 0.6), ("batch", 0.2), ("free", 0.2)):
        assert _within(counts[name], N, p), (name, counts)


def test_a_class_is_drawn_apart_from_the_mix() -> None:
    # Independent of the mix: each mix's requests split over the classes by the same shares.
    s = _scenario(traffic="  mixes: [{name: chat, weight: 0.5}, {name: rag, weight: 0.5}]\n" + CLASSES)
    sampler = sampler_for(s, 3)
    by_mix: dict[str, Counter[str]] = {"chat": Counter(), "rag": Counter()}
    for i in range(N):
        spec = sampler.spec_at(i)
        by_mix[spec.mix][spec.priority_class] += 1
    for counts in by_mix.values():
        n = sum(counts.values())
        assert _within(counts["interactive"], n, 0.6) and _within(counts["batch"], n, 0.2), by_mix


def test_classes_change_nothing_else_about_a_request() -> None:
    # Paired replay: with classes, without, or with other shares, request i is the same request but for its class.
    mixes = "  mixes: [{name: chat}, {name: rag, weight: 0.5, sessions: {turns: 3}}]\n"
    plain = sampler_for(_scenario(traffic=mixes), 5)
    skewed = "  classes: [{name: interactive, share: 1}, {name: batch, share: 99}]\n"
    for other in (
        sampler_for(_scenario(traffic=mixes + CLASSES), 5),
        sampler_for(_scenario(traffic=mixes + skewed), 5),
    ):
        for i in range(300):
            spec = other.spec_at(i)
            assert spec.priority_class and dataclasses.replace(spec, priority_class="") == plain.spec_at(i)
    assert all(plain.spec_at(i).priority_class == "" for i in range(50))


def test_the_class_of_a_request_is_the_same_everywhere() -> None:
    # Every sampler of the scenario (another worker, a fork per user, any listing order of the classes) agrees.
    s = _scenario()
    reordered = _scenario(traffic="  classes:\n" + "\n".join(reversed(CLASSES.splitlines()[1:])) + "\n")
    fork = sampler_for(s, 0).with_stream(7)
    for sampler in (sampler_for(s, 7), sampler_for(reordered, 7)):
        assert [sampler.spec_at(i).priority_class for i in range(500)] == [
            fork.spec_at(i).priority_class for i in range(500)
        ]
    # ...and streams differ from each other (the draw depends on the stream).
    other = sampler_for(s, 8)
    assert [other.spec_at(i).priority_class for i in range(500)] != [fork.spec_at(i).priority_class for i in range(500)]


def test_one_class_takes_every_request_and_a_session_keeps_its_class() -> None:
    one = sampler_for(_scenario(traffic="  classes: [{name: paid}]\n"), 0)
    assert {one.spec_at(i).priority_class for i in range(100)} == {"paid"}
    s = _scenario(traffic="  mixes: [{name: chat, sessions: {turns: 4}}]\n" + CLASSES)
    sampler = sampler_for(s, 2)
    for i in range(20):
        first = sampler.spec_at(i)
        conv = Conversation(sampler, first)
        while (turn := conv.reply("some reply", 2)) is not None:
            assert turn.priority_class == first.priority_class


def test_shares_must_be_positive_and_finite_for_a_sampler_built_by_hand() -> None:
    chat = builtin_mixes().get("chat")
    for share in (0.0, math.inf):
        with pytest.raises(ValueError, match="shares must be finite and > 0"):
            RequestSampler({"chat": chat}, {"chat": 1.0}, 0, classes={"a": 1.0, "b": share})
