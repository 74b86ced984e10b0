"""Chunk times come from the kernel's receive stamps: a worker whose event loop is held up still records when each
chunk arrived, not when it got round to reading it.

A plain-thread server (plain TCP, and TLS) writes SSE chunks 10 ms apart and logs the monotonic time just before and
just after each `send()` (on loopback the kernel usually queues, and stamps, the data at the receiver inside that
call); the client (loadgen's connection and reactor, under gevent) reads them while another greenlet blocks the whole
loop for 8 ms at a time. Tolerance: each recorded time within [before − 0.05 ms, after + 1 ms] of its chunk's send,
but for at most a tenth of the chunks (whose receive the kernel itself deferred), never after the read, while the
reads themselves are late by up to 8 ms. (Bracketing the send keeps a busy CI machine, which may pause the server
thread between its clock read and its send, from failing the test.) A reader late by more than the gap between two
chunks finds both in one read, and TCP keeps one stamp per read: the later arrival. That is what the `late reads`
health counter is for.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import gevent
import gevent.monkey
import pytest

from loadgen.client.connection import Endpoint, StreamConnection
from loadgen.client.reactor import Reactor
from loadgen.measure.records import RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect

# The OS's own sleep, thread and lock even when a test module collected beside this one imported Locust, which
# monkey-patches them into gevent's: the blocker must stop the whole loop while the server, in a real thread,
# keeps sending on time.
_os_sleep = gevent.monkey.get_original("time", "sleep")
_os_thread = gevent.monkey.get_original("_thread", "start_new_thread")
_OSLock = gevent.monkey.get_original("_thread", "allocate_lock")

CHUNKS = 40
_ISOLATED = "LOADGEN_TEST_RX_STAMPS_ISOLATED"
GAP_S = 0.010


def _serve_once(
    listener: socket.socket, sent: list[float], sent_after: list[float], tls: ssl.SSLContext | None = None
) -> None:
    conn, _ = listener.accept()
    if tls is not None:
        conn = tls.wrap_socket(conn, server_side=True)
    with conn:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        start = time.monotonic()
        for i in range(1, CHUNKS + 1):
            _os_sleep(max(0.0, start + i * GAP_S - time.monotonic()))
            ev = b'data: {"choices":[{"delta":{"content":"t"}}],"usage":{"completion_tokens":%d}}\n\n' % i
            sent.append(time.monotonic())
            conn.sendall(b"%x\r\n%s\r\n" % (len(ev), ev))
            sent_after.append(time.monotonic())
        conn.sendall(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")


class _LateReader(StreamAccumulator):
    """Notes when each event was actually handed over (how late the blocked loop read it)."""

    __slots__ = ("handled",)

    def __init__(self, record: RequestRecord) -> None:
        super().__init__(record, get_dialect("openai-chat"))
        self.handled: list[float] = []

    def on_event(self, t: float, payload: bytes) -> None:
        self.handled.append(time.monotonic())
        super().on_event(t, payload)


def _stream_while_blocked(
    stall_s: float, pki: Path | None = None
) -> tuple[RequestRecord, list[float], list[float], list[float], tuple[int, int, float]]:
    """One streamed response read while a greenlet stalls the loop for `stall_s` at a time (over TLS with `pki`).
    Returns the record, the server's times just before and just after each send, the times events were handed
    over, and the reactor's read-delay counters."""
    listener = socket.create_server(("127.0.0.1", 0))
    sent: list[float] = []
    sent_after: list[float] = []
    tls = None
    if pki is not None:
        tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls.load_cert_chain(pki / "cert.pem", pki / "key.pem")
    served = _OSLock()
    served.acquire()

    def serve() -> None:
        try:
            _serve_once(listener, sent, sent_after, tls)
        finally:
            served.release()

    _os_thread(serve, ())
    port = listener.getsockname()[1]
    stop = False

    def blocker() -> None:
        while not stop:
            _os_sleep(stall_s)  # not gevent's sleep: the whole loop stands still
            gevent.sleep(0.0035)  # a period off the chunks' 10 ms, so stalls fall on every phase

    reactor = Reactor()
    hog = gevent.spawn(blocker)
    scheme = "https" if pki is not None else "http"
    ca = str(pki / "cert.pem") if pki is not None else None
    conn = StreamConnection(Endpoint(f"{scheme}://127.0.0.1:{port}"), 5.0, 5.0, tls_ca_file=ca, reactor=reactor)
    rec = RequestRecord("r", "v", "m")
    acc = _LateReader(rec)
    head = conn.head_bytes("/v1/chat/completions", {"Content-Type": "application/json"})
    try:
        status = conn.post_stream(head, b"", b"{}", acc)[1]
    finally:
        stop = True
        hog.join(timeout=1)
        conn.close()
        served.acquire(timeout=5)
        listener.close()
    stats = reactor.pop_read_stats()
    reactor.close()
    assert status == 200 and acc.saw_done and rec.error is None
    assert len(rec.chunk_times) == len(sent) == len(sent_after) == CHUNKS
    return rec, sent, sent_after, acc.handled, stats


linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="kernel receive stamps are read on Linux")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A self-signed certificate for 127.0.0.1 (the openssl CLI)."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl CLI")
    d = tmp_path_factory.mktemp("pki")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", "key.pem", "-out", "cert.pem"],
        cwd=d, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return d


@linux_only
@pytest.mark.parametrize("transport", ["tcp", "tls"])
def test_chunk_times_are_arrival_times_while_the_loop_is_blocked(
    transport: str, request: pytest.FixtureRequest
) -> None:
    if not os.environ.get(_ISOLATED):
        # Measured in an interpreter of its own: late in the suite the test process itself held its loop ~380 ms at a
        # time (every attempt of a fresh-clone CI read that late while the kernel's stamps stayed within 0.1 ms of
        # the writes and the server thread wrote on time), which measures what earlier tests left, not loadgen.
        node = f"{Path(__file__).resolve()}::{request.node.name}"
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", node],
            env={**os.environ, _ISOLATED: "1"}, cwd=Path(__file__).resolve().parents[2],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        print(run.stdout[-3000:])
        assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout[-5000:] + run.stderr[-2000:]
        return
    certs = request.getfixturevalue("pki") if transport == "tls" else None
    # The blocker holds the loop 8 ms at a time. A read later than 100 ms means the whole VM stalled under the test
    # (seen twice in CI: reads ~380 ms late, and the kernel's own receive processing deferred with it): that
    # attempt measured the hypervisor, not loadgen, so it is run again, at most twice, and said.
    for attempt in range(3):
        rec, sent, after, handled, (reads, late, worst) = _stream_while_blocked(0.008, certs)
        errors_ms = [(t - s) * 1e3 for t, s in zip(rec.chunk_times, sent, strict=True)]
        # How late events were handed to Python, and the reactor's own worst read delay (the reads the C counter
        # takes, now up to the stream's end, never reach `on_event`).
        late_ms = [(h - s) * 1e3 for h, s in zip(handled, sent, strict=False)] + [worst * 1e3]
        print(f"recorded − written: max {max(errors_ms):.3f} ms; read late by up to {max(late_ms):.1f} ms")
        if max(late_ms) < 100:
            break
        print(f"attempt {attempt + 1}: the machine stalled (a read {max(late_ms):.0f} ms late); measuring again")
    assert max(late_ms) > 5, "the blocker must really have delayed the reads"
    outside = [
        (i, round((t - b) * 1e3, 3), round((a - b) * 1e3, 3))
        for i, (t, b, a) in enumerate(zip(rec.chunk_times, sent, after, strict=True))
        if not b - 0.05e-3 <= t <= a + 1e-3
    ]
    # Never before the send, never after the read that handed the chunk over; within 1 ms of the send for nearly
    # every chunk. Not all: on this VM the kernel at times defers loopback receive processing (and so its stamp) by
    # 5–20 ms for a chunk or three a stream. Read times would fail this: the stalls hold ~70 % of the chunks' reads.
    assert all(t >= b - 0.05e-3 for t, b in zip(rec.chunk_times, sent, strict=True))
    assert all(t <= h + 1e-3 for t, h in zip(rec.chunk_times, handled, strict=False))
    assert len(outside) <= CHUNKS // 10, f"(chunk, recorded − before, after − before) in ms: {outside}"
    # The reactor saw it too: late reads counted, the worst about one stall (a busy machine may add to it). About one
    # read a chunk: the same deferred receive processing can hand two chunks to one read (a fresh-clone CI: 38 of 40).
    assert reads >= CHUNKS - CHUNKS // 10 and late >= 3 and 0.005 < worst < 0.040


@linux_only
def test_a_reader_later_than_the_chunk_gap_gets_the_later_arrival_and_counts_it() -> None:
    """30 ms stalls, 10 ms chunk gaps: chunks pile up and one read carries several; each gets the time the last
    of them arrived (never earlier than its own write, never later than the last write of the read)."""
    rec, sent, after, handled, (reads, late, worst) = _stream_while_blocked(0.030)
    errors_ms = [(t - s) * 1e3 for t, s in zip(rec.chunk_times, sent, strict=True)]
    # Never before its write, never after the read that handed it over (the kernel stamped it before any read).
    assert all(t >= b - 0.05e-3 for t, b in zip(rec.chunk_times, sent, strict=True)), errors_ms
    assert all(t <= h + 1e-3 for t, h in zip(rec.chunk_times, handled, strict=False)), errors_ms
    # And within a stall of its write for nearly every chunk: not all, as the kernel at times defers loopback
    # receive processing (and so its stamp) on this VM (test above; a fresh-clone CI read one past 31 ms).
    outside = [
        (i, round((t - b) * 1e3, 3), round((a - b) * 1e3, 3))
        for i, (t, b, a) in enumerate(zip(rec.chunk_times, sent, after, strict=True))
        if t > a + 31e-3
    ]
    assert len(outside) <= CHUNKS // 10, f"(chunk, recorded − before, after − before) in ms: {outside}"
    assert sum(1 for e in errors_ms if e > 5) >= 5  # coalesced: the limit of one stamp per read
    # A read's stamp is its newest segment's, so the delay it shows is at most about one chunk gap (10 ms).
    assert late >= 5 and worst > 0.005 and reads < CHUNKS + 2
