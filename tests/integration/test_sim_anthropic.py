"""The simulator's Anthropic Messages route (`/v1/messages`): its bytes on the wire (raw sockets), its ground truth,
its errors and faults in Anthropic's shapes, tools and thinking; loadgen's `anthropic-messages` dialect reading them;
an agent's session (tool_use, then its tool_result) run by loadgen; and the variant's key, sent as `x-api-key` to a
server that quotes it back, in no output."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from loadgen.sim.faults import CUT, ERROR_EVENT, HTTP_429, HTTP_503, MALFORMED
from loadgen.sim.launch import SimServerThread, start_sim_process
from loadgen.sim.truth import load_truth
from tests.serving import threaded_http

from .harness import read_records, read_report, run_loadgen, write_scenario
from .test_sim_framings import accumulate, post, truth_of

ROUTE = "/v1/messages"
FAULTS: dict[str, dict[str, float]] = {
    "r429": {"rate_429": 1.0},
    "r503": {"rate_503": 1.0},
    "cut": {"cut_rate": 1.0},
    "errev": {"error_event_rate": 1.0},
    "malformed": {"malformed_rate": 1.0},
}
_THINK = 5


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServerThread]:
    truth = tmp_path_factory.mktemp("anthropic") / "truth.jsonl"
    variants = ["base=baseline", "sd=spec-decode", "think=baseline"] + [f"{name}=baseline" for name in FAULTS]
    changes = {"think": {"reasoning_tokens": str(_THINK)}}
    with SimServerThread(variants, truth_log=truth, seed=5, faults=FAULTS, profile_changes=changes) as server:
        yield server


def body_for(words: int, max_tokens: int, **extra: Any) -> dict[str, Any]:
    text = " ".join(f"w{i}" for i in range(words))
    body = {"model": "m", "max_tokens": max_tokens, "messages": [{"role": "user", "content": text}], "stream": True}
    return body | extra


def events(body: bytes) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of every SSE event; each must name itself twice alike (its line and its type)."""
    out = []
    for block in body.split(b"\n\n"):
        if not block:
            continue
        name, data = block.split(b"\n")
        assert name.startswith(b"event: ") and data.startswith(b"data: "), block
        obj = json.loads(data[len(b"data: ") :])
        assert obj["type"] == name[len(b"event: ") :].decode(), block
        out.append((obj["type"], obj))
    return out


def test_stream_framing_truth_and_the_dialect(sim: SimServerThread) -> None:
    w = post(sim.ports["sd"], ROUTE, body_for(12, 30, system="be brief"), "msg-1")
    assert w.status == 200 and w.headers["content-type"] == "text/event-stream" and w.terminated
    evs = events(w.body)
    kinds = [k for k, _ in evs]
    assert kinds[:3] == ["message_start", "content_block_start", "ping"]
    assert kinds[3:-3] == ["content_block_delta"] * 30
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    usage = evs[0][1]["message"]["usage"]
    assert usage["input_tokens"] + usage["cache_read_input_tokens"] == 14  # the system prompt's words too
    assert evs[1][1]["content_block"] == {"type": "text", "text": ""}
    deltas = [o["delta"] for k, o in evs if k == "content_block_delta"]
    assert all(d["type"] == "text_delta" and len(d["text"].split()) == 1 for d in deltas)
    end = evs[-2][1]
    assert end["delta"]["stop_reason"] == "max_tokens" and end["usage"] == {"output_tokens": 30}

    truth = truth_of(sim, "sd", "msg-1")
    # One truth record per delta, 1 token each; speculative decoding put several deltas in one write.
    assert truth.chunk_tokens == [1] * 30 and len(set(truth.chunk_times)) < 28
    rec = accumulate("anthropic-messages", w)
    assert rec.error is None and list(rec.chunk_tokens) == truth.chunk_tokens and rec.token_source == "one_per_chunk"
    assert (rec.output_tokens, rec.prompt_tokens, rec.finish_reason) == (30, 14, "length")
    assert all(c >= s for c, s in zip(rec.chunk_times, truth.chunk_times, strict=True))  # same clock


def test_thinking_then_the_answer(sim: SimServerThread) -> None:
    w = post(sim.ports["think"], ROUTE, body_for(4, 9), "msg-think")
    evs = events(w.body)
    starts = [o["content_block"]["type"] for k, o in evs if k == "content_block_start"]
    deltas = [o["delta"]["type"] for k, o in evs if k == "content_block_delta"]
    assert starts == ["thinking", "text"]
    assert deltas == ["thinking_delta"] * _THINK + ["signature_delta"] + ["text_delta"] * (9 - _THINK)
    rec = accumulate("anthropic-messages", w)
    assert list(rec.reasoning_chunks or []) == list(range(_THINK)) and rec.output_tokens == 9
    assert truth_of(sim, "think", "msg-think").reasoning_tokens == _THINK


def test_tool_use_and_its_result(sim: SimServerThread) -> None:
    tools = [{"name": "get", "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}}]
    w = post(sim.ports["base"], ROUTE, body_for(4, 50, tools=tools, tool_choice={"type": "any"}), "msg-tool")
    evs = events(w.body)
    (block,) = [o["content_block"] for k, o in evs if k == "content_block_start"]
    assert block == {"type": "tool_use", "id": "toolu_msg-tool", "name": "get", "input": {}}
    pieces = "".join(o["delta"]["partial_json"] for k, o in evs if k == "content_block_delta")
    assert list(json.loads(pieces)) == ["answer"] and evs[-2][1]["delta"]["stop_reason"] == "tool_use"
    rec = accumulate("anthropic-messages", w)
    assert rec.finish_reason == "tool_calls" and list(rec.tool_call_chunks or []) == list(range(8))  # 2 + 6 tokens
    assert truth_of(sim, "base", "msg-tool").tool_call == "get"
    # The call's result, sent back: accepted when it answers the call, refused when it answers none.
    history = [
        {"role": "user", "content": "w0 w1"},
        {"role": "assistant", "content": [{**block, "input": json.loads(pieces)}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block["id"], "content": "sunny"}]},
    ]
    w = post(sim.ports["base"], ROUTE, {"model": "m", "max_tokens": 3, "messages": history}, "msg-result")
    assert w.status == 200 and truth_of(sim, "base", "msg-result").tool_result == block["id"]
    history[1]["content"][0]["id"] = "other"
    w = post(sim.ports["base"], ROUTE, {"model": "m", "max_tokens": 3, "messages": history}, "msg-orphan")
    assert w.status == 400 and json.loads(w.body)["error"]["type"] == "invalid_request_error"


def test_an_image_is_billed_as_the_openai_route_bills_it(sim: SimServerThread) -> None:
    """The dialect's `image` block (a base64 source) costs the prompt what the same image_url part costs on chat."""
    from loadgen.protocol.dialects import get_dialect
    from loadgen.traffic.images import data_url, synthetic_image

    url = data_url(synthetic_image(64, 48, "png", 1), "png")
    spec = type("Spec", (), {"prompt": "w0 w1", "system_prompt": "", "max_tokens": 2, "images": [url]})()
    prompts = []
    for dialect, path in (("anthropic-messages", ROUTE), ("openai-chat", "/v1/chat/completions")):
        raw = get_dialect(dialect).build_body(spec, "m", False)
        w = post(sim.ports["base"], path, raw, f"img-{dialect}")
        assert w.status == 200, w.body[:300]
        prompts.append(accumulate(dialect, w).prompt_tokens)
    assert prompts[0] == prompts[1] and prompts[0] is not None and prompts[0] > 2


def test_whole_reply(sim: SimServerThread) -> None:
    w = post(sim.ports["base"], ROUTE, body_for(3, 4, stream=False), "msg-whole")
    obj = json.loads(w.body)
    assert w.status == 200 and obj["type"] == "message" and obj["stop_reason"] == "max_tokens"
    assert len(obj["content"][0]["text"].split()) == 4 and obj["usage"]["output_tokens"] == 4


@pytest.mark.parametrize(
    "body",
    [
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},  # no max_tokens
        {"model": "m", "max_tokens": 3, "messages": [{"role": "system", "content": "x"}]},
        {"model": "m", "max_tokens": 3, "messages": []},
        {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "a"}], "tool_choice": {"type": "x"}},
    ],
)
def test_bad_requests_in_anthropic_s_error_shape(sim: SimServerThread, body: dict[str, Any]) -> None:
    w = post(sim.ports["base"], ROUTE, body, "msg-bad")
    obj = json.loads(w.body)
    assert w.status == 400 and obj["type"] == "error" and obj["error"]["type"] == "invalid_request_error"


def test_faults_in_anthropic_s_shapes(sim: SimServerThread) -> None:
    statuses = (("r429", HTTP_429, 429, "rate_limit_error"), ("r503", HTTP_503, 503, "overloaded_error"))
    for variant, fault, status, kind in statuses:
        w = post(sim.ports[variant], ROUTE, body_for(3, 5), f"f-{variant}")
        assert w.status == status and json.loads(w.body)["error"]["type"] == kind
        assert truth_of(sim, variant, f"f-{variant}").faults == [fault]
    w = post(sim.ports["errev"], ROUTE, body_for(3, 8), "f-ee")
    assert events(w.body)[-1][1]["error"]["type"] == "overloaded_error"
    rec = accumulate("anthropic-messages", w)
    assert rec.error == "server_error" and "overloaded_error" in rec.error_detail
    assert truth_of(sim, "errev", "f-ee").faults == [ERROR_EVENT]
    w = post(sim.ports["cut"], ROUTE, body_for(3, 8), "f-cut")
    assert w.terminated and accumulate("anthropic-messages", w).error == "stream_interrupted"
    assert truth_of(sim, "cut", "f-cut").faults == [CUT]
    w = post(sim.ports["malformed"], ROUTE, body_for(3, 8), "f-mal")
    assert accumulate("anthropic-messages", w).error == "malformed"
    assert truth_of(sim, "malformed", "f-mal").faults == [MALFORMED]


# ---- loadgen runs ----


def test_an_agent_session_through_the_dialect(tmp_path: Path) -> None:
    """Two-turn sessions with `tool_choice: required`: the second turn sends the first turn's tool_use back with
    its tool_result, which the simulator accepts only when it answers a call made before it."""
    truth_path = tmp_path / "truth.jsonl"
    agent = {"name": "short", "tools": {"functions": 2, "tool_choice": "required"}, "sessions": {"turns": 2}}
    with start_sim_process(["agent=baseline"], truth_log=truth_path) as sim:
        variant = {"base_url": sim.base_url("agent"), "dialect": "anthropic-messages", "continuous_usage_stats": False}
        scenario = write_scenario(
            tmp_path / "agent.yaml",
            {"agent": variant},
            traffic={"mixes": [agent]},
            load={"users": 4, "duration": "3s", "warmup": 0},
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
        assert proc.returncode == 0, proc.stdout + proc.stderr
        time.sleep(1.5)  # the simulator flushes its truth log every second
    truth = load_truth(truth_path, variant="agent")
    done = [r for r in read_records(tmp_path / "raw") if r["error"] is None and not r["cut_by_stop"]]
    second = [r for r in done if r["turn"] == 2]
    assert len(second) >= 5
    for r in second:
        first = r["id"].removesuffix("-t2")
        assert truth[first].tool_call is not None
        assert truth[r["id"]].tool_result == "toolu_" + first
        assert r["tool_call_chunks"] and r["finish_reason"] == "tool_calls"
        assert r["output_tokens"] == truth[r["id"]].output_tokens == sum(r["chunk_tokens"])


_KEY = "sk-ant-canary-5d0c3f9e71a2b8"
_STREAM = (
    b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":3}}}\n\n'
    b'event: content_block_delta\ndata: {"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn"},'
    b'"usage":{"output_tokens":1}}\n\nevent: message_stop\ndata: {"type":"message_stop"}\n\n'
)


def test_the_key_goes_as_x_api_key_and_into_no_output(tmp_path: Path) -> None:
    seen: list[dict[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server API
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            seen.append({k.lower(): v for k, v in self.headers.items()})
            if len(seen) % 2:  # Anthropic's 401, quoting the key it got (as careless gateways do)
                err = {"type": "authentication_error", "message": f"invalid x-api-key: {self.headers['x-api-key']}"}
                body, status, ctype = json.dumps({"type": "error", "error": err}).encode(), 401, "application/json"
            else:
                body, status, ctype = _STREAM, 200, "text/event-stream"
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    with threaded_http(Handler) as srv:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        variant = {
            "base_url": url,
            "dialect": "anthropic-messages",
            "api_key_env": "LG_ANT_KEY",
            "continuous_usage_stats": False,
        }
        scenario = write_scenario(tmp_path / "s.yaml", {"ant": variant}, load={"users": 2, "duration": "2s"})
        proc = run_loadgen(
            scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"), env={**os.environ, "LG_ANT_KEY": _KEY}
        )
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    assert seen and all(h.get("x-api-key") == _KEY and "authorization" not in h for h in seen)
    assert all(h.get("anthropic-version") == "2023-06-01" for h in seen)
    records = read_records(tmp_path / "raw")
    refused = [r for r in records if r["error"] == "http_4xx"]
    assert refused and all("authentication_error: invalid x-api-key: ***" in r["error_detail"] for r in refused)
    assert any(r["error"] is None and r["output_tokens"] == 1 for r in records)
    out = proc.stdout + proc.stderr
    for path in sorted(tmp_path.rglob("*")):
        if path.is_file():
            out += path.read_text(errors="replace")
    assert _KEY not in out
    read_report(tmp_path / "report")
