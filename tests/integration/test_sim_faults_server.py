"""Fault injection over real loopback HTTP: with each knob at rate 1, the client sees exactly that misbehaviour and
the truth log names it. Plain sockets / http.client only, so what is asserted is what is on the wire."""

from __future__ import annotations

import asyncio
import http.client
import json
import random
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest

from loadgen.sim.faults import (
    CUT,
    ERROR_EVENT,
    FAULT_NAMES,
    HTTP_429,
    HTTP_500,
    HTTP_503,
    JSON_ERROR_ON_STREAM,
    MALFORMED,
    RESET,
    SLOW_HEADERS,
    STALL,
)
from loadgen.sim.launch import SimServerThread, start_sim_process
from loadgen.sim.truth import TruthRequest, load_truth

from .wire import dechunk

CHAT = "/v1/chat/completions"
STALL_S = 0.3
SLOW_S = 0.3
FAULTS: dict[str, dict[str, float]] = {
    "e500": {"error_rate": 1.0},
    "r429": {"rate_429": 1.0},
    "r503": {"rate_503": 1.0},
    "jsonerr": {"json_error_on_stream_rate": 1.0},
    "reset": {"reset_rate": 1.0},
    "cut": {"cut_rate": 1.0},
    "malformed": {"malformed_rate": 1.0},
    "errev": {"error_event_rate": 1.0},
    "stall": {"stall_rate": 1.0, "stall_s": STALL_S},
    "slow": {"slow_headers_s": SLOW_S},
    "chaos": {
        "error_rate": 0.1, "rate_429": 0.1, "rate_503": 0.05, "json_error_on_stream_rate": 0.05,
        "reset_rate": 0.2, "cut_rate": 0.15, "error_event_rate": 0.15, "malformed_rate": 0.3,
        "stall_rate": 0.2, "stall_s": 0.2, "slow_headers_s": 0.05,
    },
}  # fmt: skip


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServerThread]:
    truth = tmp_path_factory.mktemp("simfaults") / "truth.jsonl"
    # int8: 6 ms steps keep every stream short; "clean" has no faults.
    variants = [f"{name}=int8" for name in FAULTS] + ["clean=int8"]
    with SimServerThread(variants, truth_log=truth, seed=11, faults=FAULTS) as server:
        yield server


def truth_of(sim: SimServerThread, variant: str, rid: str) -> TruthRequest:
    sim.flush_truth()
    assert sim.cluster.truth is not None
    return load_truth(sim.cluster.truth.path, variant=variant)[rid]


def wait_idle(sim: SimServerThread, variant: str, timeout: float = 2.0) -> None:
    engine = next(s.engine for s in sim.cluster.servers if s.name == variant)
    deadline = time.monotonic() + timeout
    while (engine.num_running or engine.num_waiting) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.num_running == 0 and engine.num_waiting == 0 and engine.kv_reserved == 0


def chat(max_tokens: int = 6, stream: bool = True) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": "a b c"}],
        "max_tokens": max_tokens,
        "stream": stream,
    }


@dataclass
class Wire:
    """One request over a raw socket: the head, the body bytes with their receive times, how the read ended."""

    status: int
    head: bytes
    recvs: list[tuple[float, bytes]]
    error: OSError | None
    sent: float
    head_at: float

    @property
    def raw(self) -> bytes:
        return b"".join(data for _, data in self.recvs)

    def events(self) -> list[tuple[float, bytes]]:
        """(receive time, SSE event) of every complete event in the chunked body."""
        out: list[tuple[float, bytes]] = []
        seen = b""
        for i, (t, _) in enumerate(self.recvs):
            body, _ = dechunk(b"".join(d for _, d in self.recvs[: i + 1]))
            complete = body[: body.rfind(b"\n\n") + 2] if b"\n\n" in body else b""
            new = complete[len(seen) :]
            seen = complete
            out.extend((t, e) for e in new.split(b"\n\n") if e)
        return out


def post_raw(port: int, body: dict[str, Any], rid: str, timeout: float = 5.0) -> Wire:
    payload = json.dumps(body).encode()
    request = (
        b"POST %b HTTP/1.1\r\nHost: x\r\nX-Request-Id: %b\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%b"
        % (
            CHAT.encode(),
            rid.encode(),
            len(payload),
            payload,
        )
    )
    buf, recvs, error, head_at = b"", [], None, 0.0
    head = b""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        sent = time.monotonic()
        s.sendall(request)
        try:
            while chunk := s.recv(65536):
                now = time.monotonic()
                if not head:
                    buf += chunk
                    if b"\r\n\r\n" in buf:
                        head_at = now
                        head, rest = buf.split(b"\r\n\r\n", 1)
                        if rest:
                            recvs.append((now, rest))
                else:
                    recvs.append((now, chunk))
        except OSError as e:  # ConnectionResetError for an RST
            error = e
    status = int(head.split(b" ", 2)[1]) if head else 0
    return Wire(status, head, recvs, error, sent, head_at)


def token_events(events: list[bytes]) -> list[dict[str, Any]]:
    objs = [json.loads(e[len(b"data: ") :]) for e in events if e != b"data: [DONE]"]
    return [
        o
        for o in objs
        if o.get("choices") and "content" in o["choices"][0]["delta"] and o["choices"][0]["delta"]["content"]
    ]


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(
    ("variant", "fault", "status"), [("e500", HTTP_500, 500), ("r429", HTTP_429, 429), ("r503", HTTP_503, 503)]
)
def test_status_faults(sim: SimServerThread, variant: str, fault: str, status: int, stream: bool) -> None:
    rid = f"{variant}-{stream}"
    conn = http.client.HTTPConnection("127.0.0.1", sim.ports[variant], timeout=5)
    try:
        conn.request("POST", CHAT, json.dumps(chat(stream=stream)), {"X-Request-Id": rid})
        resp = conn.getresponse()
        body = json.loads(resp.read())
        assert resp.status == status and resp.getheader("content-type") == "application/json"
        assert body["error"]["code"] == status and body["error"]["message"] and body["error"]["type"]
        assert resp.getheader("retry-after") == ("1" if status == 429 else None)
        conn.request("GET", "/health")  # the connection stays usable
        assert conn.getresponse().status == 200
    finally:
        conn.close()
    truth = truth_of(sim, variant, rid)
    assert truth.faults == [fault] and truth.arrival is not None and not truth.chunk_times
    wait_idle(sim, variant)


def test_json_error_on_stream(sim: SimServerThread) -> None:
    w = post_raw(sim.ports["jsonerr"], chat(), "je-1")
    assert w.status == 400 and b"content-type: application/json" in w.head and b"text/event-stream" not in w.head
    err = json.loads(w.raw)["error"]
    assert err["code"] == 400 and err["message"]
    assert truth_of(sim, "jsonerr", "je-1").faults == [JSON_ERROR_ON_STREAM]
    # A non-streamed request has no SSE to refuse: answered normally.
    w = post_raw(sim.ports["jsonerr"], chat(stream=False), "je-2")
    assert w.status == 200 and json.loads(w.raw)["usage"]["completion_tokens"] == 6
    assert truth_of(sim, "jsonerr", "je-2").faults == []


def test_reset_mid_stream(sim: SimServerThread) -> None:
    for i in range(3):
        rid = f"rst-{i}"
        w = post_raw(sim.ports["reset"], chat(max_tokens=8), rid)
        assert w.status == 200
        body, terminated = dechunk(w.raw)
        assert isinstance(w.error, ConnectionResetError) or w.error is None
        assert not terminated and b"[DONE]" not in body
        tokens = token_events([e for _, e in w.events()])
        assert 1 <= len(tokens) <= 7  # at least one token chunk, never the whole answer
        assert all(t["choices"][0]["finish_reason"] is None for t in tokens)
        truth = truth_of(sim, "reset", rid)
        assert truth.faults == [RESET] and truth.aborted and len(truth.chunk_times) == len(tokens)
        wait_idle(sim, "reset")  # the aborted sequence gave its slot back
    w = post_raw(sim.ports["reset"], chat(stream=False), "rst-ns")  # non-streamed: reset before any byte
    assert w.head == b"" and w.raw == b""
    assert truth_of(sim, "reset", "rst-ns").faults == [RESET]
    wait_idle(sim, "reset")


def test_cut_ends_cleanly_without_done(sim: SimServerThread) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", sim.ports["cut"], timeout=5)
    try:
        conn.request("POST", CHAT, json.dumps(chat(max_tokens=8)), {"X-Request-Id": "cut-1"})
        resp = conn.getresponse()
        assert resp.status == 200 and resp.getheader("transfer-encoding") == "chunked"
        raw = resp.read()  # no IncompleteRead: the chunked terminator arrived
        sock = conn.sock
        conn.request("GET", "/health")  # and the connection is still good for the next request
        assert conn.getresponse().status == 200 and conn.sock is sock
    finally:
        conn.close()
    events = [e for e in raw.split(b"\n\n") if e]
    assert b"data: [DONE]" not in events
    tokens = token_events(events)
    assert 1 <= len(tokens) <= 7 and all(t["choices"][0]["finish_reason"] is None for t in tokens)
    truth = truth_of(sim, "cut", "cut-1")
    assert truth.faults == [CUT] and truth.aborted
    wait_idle(sim, "cut")


def test_malformed_chunk_then_normal_stream(sim: SimServerThread) -> None:
    w = post_raw(sim.ports["malformed"], chat(max_tokens=6), "mal-1")
    body, terminated = dechunk(w.raw)
    assert w.status == 200 and terminated
    events = [e for e in body.split(b"\n\n") if e]
    bad = []
    for e in events:
        try:
            json.loads(e[len(b"data: ") :]) if e != b"data: [DONE]" else None
        except json.JSONDecodeError:
            bad.append(e)
    assert len(bad) == 1 and bad[0].startswith(b"data: {") and bad[0].endswith(b'"choices":[')
    good = [e for e in events if e not in bad]
    assert good[-1] == b"data: [DONE]"
    tokens = token_events(good)
    assert sum(len(t["choices"][0]["delta"]["content"].split()) for t in tokens) == 6
    assert tokens[-1]["choices"][0]["finish_reason"] == "length"
    truth = truth_of(sim, "malformed", "mal-1")
    assert truth.faults == [MALFORMED] and truth.finish is not None and not truth.aborted


def test_error_event_then_done(sim: SimServerThread) -> None:
    w = post_raw(sim.ports["errev"], chat(max_tokens=8), "ee-1")
    body, terminated = dechunk(w.raw)
    assert w.status == 200 and terminated
    events = [e for e in body.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    err = json.loads(events[-2][len(b"data: ") :])["error"]
    assert err["type"] == "server_error" and err["code"] == 500 and err["message"]
    tokens = token_events(events[:-2])
    assert 1 <= len(tokens) <= 7 and all(t["choices"][0]["finish_reason"] is None for t in tokens)
    truth = truth_of(sim, "errev", "ee-1")
    assert truth.faults == [ERROR_EVENT] and truth.aborted
    wait_idle(sim, "errev")


def test_stall_after_first_token(sim: SimServerThread) -> None:
    w = post_raw(sim.ports["stall"], chat(max_tokens=6), "st-1")
    assert w.status == 200 and dechunk(w.raw)[1]
    timed = [(t, e) for t, e in w.events() if e.startswith(b"data: {")]
    objs = [(t, json.loads(e[len(b"data: ") :])) for t, e in timed]
    token_times = [t for t, o in objs if o["choices"] and o["choices"][0]["delta"].get("content")]
    assert len(token_times) == 6
    # The client's gap can only be shorter than the server's by the first chunk's delivery latency.
    assert token_times[1] - token_times[0] >= STALL_S - 0.05
    truth = truth_of(sim, "stall", "st-1")
    assert truth.faults == [STALL] and truth.finish is not None
    assert truth.chunk_times[1] - truth.chunk_times[0] >= STALL_S
    assert truth.output_tokens == 6


@pytest.mark.parametrize("stream", [True, False])
def test_slow_headers(sim: SimServerThread, stream: bool) -> None:
    rid = f"slow-{stream}"
    w = post_raw(sim.ports["slow"], chat(max_tokens=4, stream=stream), rid)
    assert w.status == 200 and w.head_at - w.sent >= SLOW_S
    truth = truth_of(sim, "slow", rid)
    assert truth.faults == [SLOW_HEADERS] and truth.arrival is not None and truth.finish is not None
    assert truth.chunk_times[0] - truth.arrival >= SLOW_S  # TTFT as the client sees it includes the delay
    if stream:
        assert dechunk(w.raw)[1] and w.raw.count(b"data: [DONE]") == 1
        # The engine ran while the head was held (4 tokens take ~25 ms): all chunks left in the one late write.
        assert len(truth.chunk_times) == 4 and len(set(truth.chunk_times)) == 1
    else:
        assert json.loads(w.raw)["usage"]["completion_tokens"] == 4


def _chaos_request(port: int, i: int) -> str:
    rng = random.Random(i)
    body = chat(max_tokens=rng.randint(1, 12), stream=rng.random() < 0.8)
    if i % 7 == 0:  # some clients give up early, mid-stall or before the slow head arrives
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            payload = json.dumps(body).encode()
            s.sendall(b"POST %b HTTP/1.1\r\nContent-Length: %d\r\n\r\n%b" % (CHAT.encode(), len(payload), payload))
            time.sleep(0.02)
        return "gave-up"
    w = post_raw(port, body, f"chaos-{i}")
    return "reset" if isinstance(w.error, ConnectionResetError) else str(w.status)


def test_burst_of_faults_leaves_server_healthy(sim: SimServerThread) -> None:
    def n_tasks() -> int:
        return len(asyncio.all_tasks())

    tasks_before = sim.call(n_tasks)
    with ThreadPoolExecutor(12) as pool:
        outcomes = list(pool.map(lambda i: _chaos_request(sim.ports["chaos"], i), range(60)))
    assert {"200", "reset"} <= set(outcomes)
    wait_idle(sim, "chaos", timeout=3.0)
    assert sim.call(n_tasks) == tasks_before  # faults use timers, never tasks, and nothing is left behind

    sim.flush_truth()
    assert sim.cluster.truth is not None
    lines = [json.loads(line) for line in sim.cluster.truth.path.read_text().splitlines()]
    logged = [r["fault"] for r in lines if r["variant"] == "chaos" and r["kind"] == "fault"]
    conn = http.client.HTTPConnection("127.0.0.1", sim.ports["chaos"], timeout=5)
    try:
        conn.request("GET", "/metrics")
        metrics = conn.getresponse().read().decode()
    finally:
        conn.close()
    for fault in FAULT_NAMES:
        line = next(m for m in metrics.splitlines() if m.startswith(f'loadgen_sim_faults_total{{fault="{fault}"}}'))
        assert float(line.rsplit(" ", 1)[1]) == logged.count(fault), fault
    assert len(set(logged)) >= 6  # the burst really exercised most kinds

    w = post_raw(sim.ports["clean"], chat(max_tokens=5), "after-burst")
    assert w.status == 200 and dechunk(w.raw)[1] and w.raw.count(b"data: [DONE]") == 1
    assert truth_of(sim, "clean", "after-burst").faults == []


def test_sim_process_passes_faults(tmp_path: Any) -> None:
    faults = {"baseline": {"rate_429": 1.0}}
    with start_sim_process(["baseline"], truth_log=tmp_path / "t.jsonl", faults=faults) as proc:
        w = post_raw(proc.ports["baseline"], chat(), "p-429")
        assert w.status == 429 and b"retry-after: 1" in w.head
    assert load_truth(tmp_path / "t.jsonl")["p-429"].faults == [HTTP_429]
