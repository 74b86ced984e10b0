"""The simulator over real loopback HTTP: SSE framing, JSON routes, metrics, ground truth, connection handling."""

from __future__ import annotations

import http.client
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from loadgen.sim.__main__ import main as sim_main
from loadgen.sim.launch import SimServerThread, start_sim_process
from loadgen.sim.truth import load_truth

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServerThread]:
    truth = tmp_path_factory.mktemp("sim") / "truth.jsonl"
    with SimServerThread(["baseline", "fast=spec-decode"], truth_log=truth, seed=3) as server:
        yield server


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10.0) as c:
        yield c


def stream_events(
    client: httpx.Client, url: str, body: dict[str, Any], rid: str
) -> tuple[httpx.Response, list[tuple[float, Any]]]:
    """POST a streaming request; returns the response and (receive time, parsed event) pairs, '[DONE]' as str."""
    events: list[tuple[float, Any]] = []
    with client.stream("POST", url, json=body, headers={"X-Request-Id": rid}) as r:
        for line in r.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line
            payload = line[len("data: ") :]
            events.append((time.monotonic(), payload if payload == "[DONE]" else json.loads(payload)))
    return r, events


def chat_body(n_words: int, max_tokens: int, **extra: Any) -> dict[str, Any]:
    content = " ".join(f"w{i}" for i in range(n_words))
    return {"model": "m", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, **extra}


def test_chat_stream_framing_and_truth(sim: SimServerThread, client: httpx.Client) -> None:
    body = chat_body(30, 9, stream=True, stream_options={"include_usage": True})
    r, events = stream_events(client, sim.base_url("baseline") + CHAT, body, "chat-1")
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/event-stream"
    assert r.headers["x-request-id"] == "chat-1"
    objs = [e for _, e in events]
    assert objs[-1] == "[DONE]"
    role, *content, usage, _ = objs
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert role["object"] == "chat.completion.chunk" and role["id"] == "chatcmpl-chat-1"
    assert "usage" not in role
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1])
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    text = "".join(c["choices"][0]["delta"]["content"] for c in content)
    assert len(text.split()) == 9 and text.startswith(" ")
    assert usage["choices"] == [] and usage["usage"] == {
        "prompt_tokens": 30,
        "completion_tokens": 9,
        "total_tokens": 39,
    }

    sim.flush_truth()
    truth = load_truth(sim.cluster.truth.path, variant="baseline")["chat-1"]  # type: ignore[union-attr]
    assert truth.chunk_tokens == [1] * 9 and len(truth.chunk_times) == len(content)
    assert truth.arrival is not None and truth.finish is not None
    assert truth.arrival < truth.chunk_times[0] and truth.finish == truth.chunk_times[-1]
    # Same clock: every content chunk is received after the server timestamped its write.
    recv = [t for t, e in events[1 : 1 + len(content)]]
    assert all(r_t >= w_t for r_t, w_t in zip(recv, truth.chunk_times, strict=True))


def test_completions_stream_continuous_usage_multi_token_chunks(sim: SimServerThread, client: httpx.Client) -> None:
    body = {
        "model": "m",
        "prompt": "one two three four",
        "max_tokens": 40,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    _, events = stream_events(client, sim.base_url("fast") + COMPLETIONS, body, "cmpl-cont")
    objs = [e for _, e in events]
    assert objs[-1] == "[DONE]"
    *content, final, _ = objs
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 40
    assert all(c["object"] == "text_completion" and "delta" not in c["choices"][0] for c in content)
    previous = 0
    for c in content:  # no role chunk for completions; every chunk carries cumulative usage
        n_words = len(c["choices"][0]["text"].split())
        assert 1 <= n_words <= 4
        assert c["usage"]["completion_tokens"] - previous == n_words
        assert c["usage"]["prompt_tokens"] == 4
        previous = c["usage"]["completion_tokens"]
    assert previous == 40 and len(content) < 40  # speculative decoding packed several tokens per chunk

    sim.flush_truth()
    truth = load_truth(sim.cluster.truth.path, variant="fast")["cmpl-cont"]  # type: ignore[union-attr]
    assert truth.chunk_tokens == [len(c["choices"][0]["text"].split()) for c in content]


def test_chat_continuous_usage_on_role_chunk(sim: SimServerThread, client: httpx.Client) -> None:
    body = chat_body(5, 3, stream=True, stream_options={"continuous_usage_stats": True})
    _, events = stream_events(client, sim.base_url("baseline") + CHAT, body, "chat-cont")
    objs = [e for _, e in events]
    assert objs[0]["usage"] == {"prompt_tokens": 5, "completion_tokens": 0, "total_tokens": 5}
    assert [o["usage"]["completion_tokens"] for o in objs[1:-1]] == [1, 2, 3]


def test_non_stream_json(sim: SimServerThread, client: httpx.Client) -> None:
    r = client.post(sim.base_url("baseline") + CHAT, json=chat_body(7, 5))
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    obj = r.json()
    assert obj["object"] == "chat.completion"
    assert obj["choices"][0]["message"]["role"] == "assistant"
    assert len(obj["choices"][0]["message"]["content"].split()) == 5
    assert obj["choices"][0]["finish_reason"] == "length"
    assert obj["usage"] == {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    r = client.post(sim.base_url("baseline") + COMPLETIONS, json={"prompt": "a b", "model": "m"})
    assert r.json()["usage"]["completion_tokens"] == 16  # default max_tokens
    assert len(r.json()["choices"][0]["text"].split()) == 16


def test_models_health_metrics(sim: SimServerThread, client: httpx.Client) -> None:
    base = sim.base_url("baseline")
    assert client.get(base + "/health").status_code == 200
    models = client.get(base + "/v1/models").json()
    assert models["object"] == "list" and models["data"][0]["id"] == "baseline"
    client.post(base + COMPLETIONS, json={"prompt": "x y z", "max_tokens": 2})
    metrics = client.get(base + "/metrics").text
    for name in (
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:kv_cache_usage_perc",
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:e2e_request_latency_seconds_count",
    ):
        assert f'{name}{{model_name="baseline"' in metrics or f"{name}{{le=" in metrics, name
    generated = next(line for line in metrics.splitlines() if line.startswith("vllm:generation_tokens_total"))
    assert float(generated.rsplit(" ", 1)[1]) >= 2
    # The engine never preempts: no counter that would only ever say 0.
    assert "vllm:num_preemptions" not in metrics
    # Each variant has its own registry.
    assert 'model_name="fast"' not in metrics


def test_bad_requests_get_openai_errors(sim: SimServerThread, client: httpx.Client) -> None:
    base = sim.base_url("baseline")
    r = client.post(base + CHAT, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["code"] == 400 and err["type"] and "JSON" in err["message"]
    assert client.post(base + CHAT, json={"model": "m"}).status_code == 400
    assert client.post(base + COMPLETIONS, json={"prompt": "x", "max_tokens": 0}).status_code == 400
    assert client.get(base + "/nope").status_code == 404


def test_keep_alive_reuses_one_connection(sim: SimServerThread) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", sim.ports["baseline"], timeout=5)
    try:
        conn.request("GET", "/health")
        assert conn.getresponse().read() == b""
        sock = conn.sock
        body = json.dumps(chat_body(3, 2, stream=True)).encode()
        conn.request("POST", CHAT, body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("transfer-encoding") == "chunked"
        assert resp.read().endswith(b"data: [DONE]\n\n")
        assert conn.sock is sock and sock is not None
    finally:
        conn.close()


def _read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_pipelined_partial_requests_and_malformed(sim: SimServerThread) -> None:
    port = sim.ports["baseline"]
    req = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
    body = json.dumps({"prompt": "p q", "max_tokens": 1}).encode()
    post = b"POST /v1/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b" % (len(body), body)
    last = b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        wire = req + post + last
        s.sendall(wire[:7])  # a split request line, then everything else pipelined in uneven pieces
        time.sleep(0.02)
        s.sendall(wire[7:60])
        s.sendall(wire[60:])
        data = _read_until_closed(s)
    assert data.count(b"HTTP/1.1 200 OK") == 3 and b'"completion_tokens":1' in data
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(b"NONSENSE\r\n\r\n")
        data = _read_until_closed(s)  # answered, then closed
    assert data.startswith(b"HTTP/1.1 400 ")


def test_client_disconnect_aborts_sequence(sim: SimServerThread) -> None:
    engine = sim.cluster.servers[0].engine
    body = json.dumps(chat_body(3, 10_000, stream=True)).encode()
    with socket.create_connection(("127.0.0.1", sim.ports["baseline"]), timeout=5) as s:
        s.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nX-Request-Id: gone\r\nContent-Length: %d\r\n\r\n%b"
            % (len(body), body)
        )
        assert s.recv(65536).startswith(b"HTTP/1.1 200 OK")
        time.sleep(0.05)
        assert engine.num_running == 1
    deadline = time.monotonic() + 2
    while engine.num_running and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.num_running == 0 and engine.kv_reserved == 0
    sim.flush_truth()
    assert load_truth(sim.cluster.truth.path, variant="baseline")["gone"].aborted  # type: ignore[union-attr]


def test_sim_process_ready_line_and_clean_stop(tmp_path: Path) -> None:
    truth = tmp_path / "truth.jsonl"
    with start_sim_process(["a=int8", "baseline"], truth_log=truth) as proc:
        assert set(proc.ports) == {"a", "baseline"} and all(p > 0 for p in proc.ports.values())
        r = httpx.post(
            proc.base_url("a") + COMPLETIONS, json={"prompt": "hi", "max_tokens": 3}, headers={"X-Request-Id": "p1"}
        )
        assert r.json()["usage"]["completion_tokens"] == 3
    assert proc.proc.returncode == 0
    assert load_truth(truth)["p1"].chunk_tokens == [3]  # flushed on SIGTERM


def test_unknown_profile_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert sim_main(["--variant", "x=warp-drive"]) == 2
    err = capsys.readouterr().err
    assert "warp-drive" in err and "baseline" in err and "spec-decode" in err
