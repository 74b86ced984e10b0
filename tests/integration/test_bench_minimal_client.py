"""bench/clients/minimal_client.c, the C ground truth of bench/cpu.py's chunks-per-core rows, counts exactly: against
bench/server.py a fixed number of requests gives requests × chunks, events and tokens to the unit; against a server
that dribbles its reply in pieces of 1–7 bytes (chunk sizes, CRLFs, events and `data:` lines all cut anywhere, an
event spanning two chunks, a chunk extension, a trailer) the same counts; a reply that is not 200 is an error and a
nonzero exit. No timing is asserted."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from bench.cpu import build_minimal_client

from .harness import serving_bench

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="no C compiler")


@pytest.fixture(scope="module")
def client() -> Path:
    return build_minimal_client()


def _run(client: Path, port: int, *args: str) -> tuple[int, dict[str, int]]:
    proc = subprocess.run(
        [str(client), "--port", str(port), "--seconds", "60", *args], capture_output=True, timeout=90, check=False
    )
    return proc.returncode, orjson.loads(proc.stdout.splitlines()[-1])


@pytest.fixture
def bench_server(tmp_path: Path) -> Iterator[int]:
    with serving_bench(tmp_path, "--k", "3", "--itl-ms", "1", "--ttft-ms", "1", "--no-spin") as (port, _):
        yield port


def test_counts_against_the_bench_server(client: Path, bench_server: int) -> None:
    # 10 tokens, 3 per chunk: 4 token chunks (3, 3, 3, 1); events: the role chunk, those 4 and the usage chunk.
    rc, out = _run(client, bench_server, "--streams", "4", "--requests", "24", "--max-tokens", "10")
    assert rc == 0
    assert {k: out[k] for k in ("requests", "chunks", "events", "tokens", "errors")} == {
        "requests": 24,
        "chunks": 24 * 4,
        "events": 24 * 6,
        "tokens": 24 * 10,
        "errors": 0,
    }


def _event(cum: int, text: str) -> bytes:
    return b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}],"usage":{"completion_tokens":%d}}\r\n\r\n' % (
        text.encode(),
        cum,
    )


def _reply() -> bytes:
    """A chunked SSE reply of 5 token chunks (7 tokens), a role event, a usage-only event, [DONE] and a trailer;
    one event split over two HTTP chunks, one chunk holding two events, one with an extension."""
    events = [b'data: {"choices":[{"delta":{"role":"assistant"}}],"usage":{"completion_tokens":0}}\n\n']
    events += [_event(1, " a"), _event(3, " b c"), _event(4, " d"), _event(6, " e f"), _event(7, " g")]
    events += [b'data: {"choices":[],"usage":{"completion_tokens":7}}\n\n', b"data: [DONE]\n\n"]
    split = events[2]
    pieces = [events[0] + events[1], split[:17], split[17:], events[3], events[4] + events[5], events[6], events[7]]
    body = b""
    for i, p in enumerate(pieces):
        body += b"%x%s\r\n%s\r\n" % (len(p), b";ext=1" if i == 3 else b"", p)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + body + b"0\r\nX-Trailer: yes\r\n\r\n"


@pytest.fixture
def dribbler() -> Iterator[tuple[int, list[int]]]:
    """Answers every request on a keep-alive connection with `_reply()` written 1–7 bytes at a time; the port and
    how many requests it answered."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    served = [0]
    reply = _reply()

    def serve(conn: socket.socket, seed: int) -> None:
        rng = random.Random(seed)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        with conn:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, rest = buf.partition(b"\r\n\r\n")
                length = int(
                    next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length:"))
                )
                while len(rest) < length:
                    rest += conn.recv(65536)
                buf = rest[length:]
                served[0] += 1
                i = 0
                while i < len(reply):
                    n = rng.randint(1, 7)
                    conn.sendall(reply[i : i + n])
                    i += n
                    if rng.random() < 0.1:
                        time.sleep(0.0005)  # let a read end here

    def accept() -> None:
        seed = 0
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            seed += 1
            threading.Thread(target=serve, args=(conn, seed), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], served
    finally:
        listener.close()


def test_counts_with_replies_cut_anywhere(client: Path, dribbler: tuple[int, list[int]]) -> None:
    port, served = dribbler
    rc, out = _run(client, port, "--streams", "3", "--requests", "12")
    assert rc == 0
    assert served[0] == 12
    assert {k: out[k] for k in ("requests", "chunks", "events", "tokens", "errors")} == {
        "requests": 12,
        "chunks": 12 * 5,
        "events": 12 * 7,
        "tokens": 12 * 7,
        "errors": 0,
    }
    assert out["bytes"] == 12 * len(_reply())


def test_a_reply_that_is_not_200_is_an_error(client: Path) -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            conn.recv(1)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        rc, out = _run(client, listener.getsockname()[1], "--streams", "1", "--requests", "1")
    finally:
        listener.close()
    assert rc == 1
    assert out["errors"] >= 1
    assert out["requests"] == 0
