"""Sessions on the wire (`variants[].routing`): the block's presets and checks, each mistake named at its field (exit
2 before any load); the session ids (stable, paired across variants, unique across users and workers); the header
lines each turn carries, the token replay; the SLO headers' values."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loadgen.config.errors import ConfigError
from loadgen.config.routing import Routing, format_ms, slo_header_values
from loadgen.config.scenario import Scenario, parse_scenario
from loadgen.exit_codes import ExitCode
from loadgen.traffic.sampler import RequestSpec, sampler_for
from loadgen.traffic.sessions import SessionHeaders, session_id


def _scenario(routing: str, rest: str = "", variant: str = "") -> Scenario:
    text = f'variants:\n  - {{name: a, base_url: "http://127.0.0.1:1", model: m, routing: {routing}{variant}}}\n'
    return parse_scenario(text + rest, "s.yaml")


def _issues(routing: str, rest: str = "", variant: str = "") -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        _scenario(routing, rest, variant)
    return {i.path: i.message for i in err.value.issues}


def test_presets_fill_the_fields_and_a_field_given_wins() -> None:
    dynamo = _scenario("{preset: dynamo}").variants[0].routing
    assert dynamo is not None and dynamo.session_header == "X-Dynamo-Session-ID" and dynamo.token_header is None
    assert dynamo.parent_header == "X-Dynamo-Parent-Session-ID"
    llmd = _scenario("{preset: llm-d}").variants[0].routing
    assert llmd is not None and (llmd.token_header, llmd.replay_header) == ("x-session-token", "x-session-token")
    assert llmd.session_header is None
    by_id = _scenario("{preset: llm-d-session-id}").variants[0].routing
    assert by_id is not None and by_id.session_header == "x-session-token" and by_id.token_header is None
    mine = _scenario("{preset: dynamo, session_header: X-Conversation}").variants[0].routing
    assert mine is not None and mine.session_header == "X-Conversation"
    # An explicit null turns a preset's field off.
    off = _scenario("{preset: dynamo, session_header: null, slo_headers: {ttft_ms: 500}}").variants[0].routing
    assert off is not None and off.session_header is None and off.parent_header is None
    both = _scenario("{token_header: x-tok, replay_header: x-tok-back, session_header: x-sid}").variants[0].routing
    assert both is not None and (both.token_header, both.replay_header) == ("x-tok", "x-tok-back")
    assert _scenario("{preset: llm-d}").variants[0].routing != _scenario("{preset: dynamo}").variants[0].routing


@pytest.mark.parametrize(
    ("routing", "variant", "path", "words"),
    [
        # Credential headers, by name or because the variant sends one in it.
        ("{session_header: Authorization}", "", "session_header", "Authorization carries a credential"),
        ("{session_header: x-api-key}", "", "session_header", "x-api-key carries a credential"),
        ("{session_header: API-Key}", "", "session_header", "API-Key carries a credential"),
        ("{token_header: x-t, replay_header: Cookie}", "", "replay_header", "Cookie carries a credential"),
        ("{slo_headers: {ttft_ms: 1, ttft_header: proxy-authorization}}", "", "slo_headers.ttft_header", "credential"),
        (
            "{session_header: X-Gateway}",
            ", headers_from_env: {x-gateway: GW}",
            "session_header",
            "X-Gateway carries a credential (variants[0].headers_from_env)",
        ),
        # Headers loadgen or the scenario sends already, or two fields naming one header.
        ("{session_header: X-Request-Id}", "", "session_header", "loadgen writes X-Request-Id itself"),
        ("{session_header: traceparent}", "", "session_header", "loadgen writes traceparent itself"),
        ("{session_header: content-length}", "", "session_header", "loadgen writes content-length itself"),
        (
            "{session_header: Anthropic-Version}",
            ", dialect: anthropic-messages",
            "session_header",
            "the anthropic-messages dialect sends Anthropic-Version on every request",
        ),
        ("{session_header: X-Route}", ", headers: {x-route: canary}", "session_header", "variants[0].headers sets"),
        ("{preset: llm-d-session-id, token_header: x-session-token}", "", "replay_header", "session_header names"),
        ("{session_header: x-slo-ttft-ms, slo_headers: {}}", "", "slo_headers.ttft_header", "session_header names"),
        # Names that are not HTTP tokens; a block that would send nothing; a replay with nothing to replay.
        ("{session_header: 'x session'}", "", "session_header", "not a valid HTTP header name"),
        ("{token_header: 'x:y'}", "", "token_header", "not a valid HTTP header name"),
        ("{slo_headers: {ttft_ms: 1, tpot_header: 'a b'}}", "", "slo_headers.tpot_header", "not a valid HTTP header"),
        ("{slo_headers: {ttft_ms: 1, tpot_header: X-SLO-TTFT-MS}}", "", "slo_headers.tpot_header", "ttft_header too"),
        ("{}", "", "", "sends nothing"),
        ("{replay_header: x-back}", "", "replay_header", "token_header, which is not set"),
        ("{parent_header: x-parent, slo_headers: {ttft_ms: 1}}", "", "parent_header", "session_header id"),
        ("{session_header: x-s, parent_header: X-S}", "", "parent_header", "session_header names"),
        ("{token_header: Set-Cookie}", "", "token_header", "a cookie is a credential"),
        ("{preset: envoy}", "", "preset", "'dynamo', 'llm-d' or 'llm-d-session-id'"),
        ("{session_header: x-s, sticky: true}", "", "sticky", ""),
        ("{slo_headers: {ttft_ms: 0}}", "", "slo_headers.ttft_ms", "greater than 0"),
    ],
)
def test_each_mistake_is_named_at_its_field(routing: str, variant: str, path: str, words: str) -> None:
    issues = _issues(routing, variant=variant)
    where = "variants[0].routing" + (f".{path}" if path else "")
    assert where in issues, issues
    assert words in issues[where], issues


def test_slo_headers_need_a_target_from_the_block_or_goodput() -> None:
    issues = _issues("{slo_headers: {}}")
    assert "no target to send" in issues["variants[0].routing.slo_headers"]
    # goodput without a TTFT or TPOT bound gives none either.
    issues = _issues("{slo_headers: {}}", rest="goodput: {e2e_ms: 9000}")
    assert "goodput.ttft_ms" in issues["variants[0].routing.slo_headers"]


def test_a_session_header_on_a_class_header_is_refused() -> None:
    rest = "traffic:\n  classes: [{name: i, headers: {X-Tenant: t1}}, {name: b}]"
    issues = _issues("{session_header: x-tenant}", rest=rest)
    assert "traffic.classes[0].headers sets x-tenant too" in issues["variants[0].routing.session_header"]


def test_a_colliding_session_header_is_exit_2_before_any_load(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "variants:\n"
        "  - name: a\n"
        "    base_url: http://127.0.0.1:1\n"
        "    model: m\n"
        "    api_key_env: LG_KEY\n"
        "    routing:\n"
        "      session_header: Authorization\n",
        encoding="utf-8",
    )
    # `run` against an unreachable variant: the scenario is refused first, so nothing is ever sent.
    env = {"PATH": "/usr/bin:/bin", "LG_KEY": "sk-routing-canary-0123456789"}
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "run", str(path), "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == ExitCode.USAGE == 2, proc.stderr
    assert "s.yaml:7: variants[0].routing.session_header: Authorization carries a credential" in proc.stderr
    assert "sk-routing-canary" not in proc.stdout + proc.stderr


# --- the wire ---------------------------------------------------------------------------------------------------


def test_slo_header_values_take_the_block_s_targets_else_goodput_s() -> None:
    s = _scenario("{slo_headers: {tpot_ms: 42.5}}", rest="goodput: {ttft_ms: 2000, tpot_ms: 80}")
    routing = s.variants[0].routing
    assert routing is not None and routing.slo_headers is not None
    assert slo_header_values(routing.slo_headers, s.goodput) == {"x-slo-ttft-ms": "2000", "x-slo-tpot-ms": "42.5"}
    renamed = Routing.model_validate({"slo_headers": {"ttft_ms": 500, "ttft_header": "x-llm-d-slo-ttft-ms"}})
    assert renamed.slo_headers is not None
    assert slo_header_values(renamed.slo_headers, None) == {"x-llm-d-slo-ttft-ms": "500"}
    assert [format_ms(v) for v in (1.0, 2000, 0.25, 1e7, 12.3456789)] == ["1", "2000", "0.25", "10000000", "12.345679"]


def test_session_ids_are_stable_paired_and_unique() -> None:
    assert session_id(7, 3, 12) == session_id(7, 3, 12) == "lg-7-3-12"
    # Closed loop: stream = worker * 100000 + slot; open loop: stream 0, the index the schedule's (all workers).
    streams = [w * 100_000 + slot for w in range(4) for slot in range(50)]
    ids = {session_id(7, s, i) for s in streams for i in range(100)}
    assert len(ids) == len(streams) * 100
    assert session_id(7, 3, 12) != session_id(8, 3, 12)


def _spec(index: int, turn: int, turns: int) -> RequestSpec:
    return RequestSpec(index, "chat", "short", "", "hi", 1, 1, turn=turn, turns=turns)


def test_each_turn_carries_its_session_s_id_and_latest_token_and_no_other() -> None:
    routing = Routing.model_validate({"session_header": "X-Dynamo-Session-ID", "token_header": "x-session-token"})
    wire = SessionHeaders(routing, 5, 100_002)
    assert wire.head(_spec(9, 0, 0)) == b"" and wire.wants(_spec(9, 0, 0)) is None  # a single request: nothing
    first = _spec(1, 1, 3)
    assert wire.head(first) == b"X-Dynamo-Session-ID: lg-5-100002-1\r\n"
    assert wire.wants(first) == "x-session-token"
    wire.took(first, "  cG9kLWE=  ")
    second = _spec(1, 2, 3)
    assert wire.head(second) == b"X-Dynamo-Session-ID: lg-5-100002-1\r\nx-session-token: cG9kLWE=\r\n"
    wire.took(second, None)  # no token on this response: the last one stays
    third = _spec(1, 3, 3)
    assert wire.head(third).endswith(b"x-session-token: cG9kLWE=\r\n")
    assert wire.wants(third) is None  # the last turn: nothing to capture for
    # The next session starts afresh: its own id, no token of the one before.
    other = _spec(2, 1, 2)
    assert wire.head(other) == b"X-Dynamo-Session-ID: lg-5-100002-2\r\n"
    wire.took(other, "cG9kLWI=")
    # A token for a session that is no longer the stream's (a late response) is dropped, not given to another.
    wire.took(first, "stale")
    assert wire.head(_spec(2, 2, 2)).endswith(b"x-session-token: cG9kLWI=\r\n")
    # A session whose turn 1 this stream never saw (another session's turn came between) starts without a token.
    assert wire.head(_spec(1, 2, 3)) == b"X-Dynamo-Session-ID: lg-5-100002-1\r\n"


def test_a_sub_agent_is_a_session_of_its_own_naming_its_parent() -> None:
    wire = SessionHeaders(Routing.model_validate({"preset": "dynamo", "token_header": "x-tok"}), 5, 3)
    root = _spec(7, 2, 4)
    assert wire.head(root) == b"X-Dynamo-Session-ID: lg-5-3-7\r\n"
    wire.took(root, "root-token")
    # A sub-agent (its own stream: RequestStream.fork) carries its id and its parent's, never the parent's token.
    child = wire.fresh()
    one = RequestSpec(7, "agent", "t", "", "hi", 1, 1, turn=1, turns=2, branch="1")
    assert child.head(one) == b"X-Dynamo-Session-ID: lg-5-3-7-b1\r\nX-Dynamo-Parent-Session-ID: lg-5-3-7\r\n"
    nested = RequestSpec(7, "agent", "t", "", "hi", 1, 1, turn=1, turns=2, branch="1.2")
    assert child.fresh().head(nested) == (
        b"X-Dynamo-Session-ID: lg-5-3-7-b1.2\r\nX-Dynamo-Parent-Session-ID: lg-5-3-7-b1\r\n"
    )
    child.took(one, "child-token")
    assert child.head(RequestSpec(7, "agent", "t", "", "hi", 1, 1, turn=2, turns=2, branch="1")).endswith(
        b"x-tok: child-token\r\n"
    )
    assert wire.head(_spec(7, 3, 4)) == b"X-Dynamo-Session-ID: lg-5-3-7\r\nx-tok: root-token\r\n"
    assert session_id(5, 3, 7, "1.2") == "lg-5-3-7-b1.2"


@pytest.mark.parametrize("bad", ["a\r\nX-Evil: 1", "tok\x00en", "pod-é", ""])
def test_a_token_the_head_cannot_carry_as_written_is_not_replayed(bad: str) -> None:
    wire = SessionHeaders(Routing.model_validate({"preset": "llm-d"}), 0, 0)
    first = _spec(4, 1, 2)
    assert wire.head(first) == b""
    wire.took(first, bad)
    assert wire.head(_spec(4, 2, 2)) == b""


def test_the_same_session_has_the_same_id_on_every_variant() -> None:
    """The k-th user of every variant replays stream k: its sessions, so its session ids, are the same."""
    s = parse_scenario(
        textwrap.dedent(
            """\
            seed: 4
            variants:
              - {name: a, base_url: "http://127.0.0.1:1", model: m, routing: {preset: dynamo}}
              - {name: b, base_url: "http://127.0.0.1:2", model: m, routing: {preset: llm-d-session-id}}
            traffic:
              mixes: [{name: chat, sessions: {turns: [2, 4]}}]
            """
        )
    )
    heads: dict[str, list[bytes]] = {}
    for v in s.variants:
        assert v.routing is not None
        wire, sampler = SessionHeaders(v.routing, s.seed, 7), sampler_for(s, 7)
        heads[v.name] = [wire.head(sampler.next()).split(b": ", 1)[1] for _ in range(20)]
    assert heads["a"] == heads["b"] and len(set(heads["a"])) == 20
