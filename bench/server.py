"""A fast ground-truth streaming server for benchmarking load generators.

OpenAI-compatible (`/v1/chat/completions`, `/v1/completions`, `/v1/models`), streamed as SSE over chunked HTTP/1.1,
with k tokens per chunk, a fixed time to first token and a fixed time per token, and `usage` in every chunk when the
client asks for `stream_options.continuous_usage_stats` (as vLLM does). It logs the monotonic time immediately before
the `send()` that carried every token chunk, in the simulator's truth-log format (`loadgen.sim.truth.load_truth`
reads it), so any client on this host can be graded chunk by chunk.

Built for throughput on one core: one `epoll` loop over non-blocking sockets, no framework, chunks formatted from
byte templates, a heap of due times, and one `send()` per connection per tick — when a stream is late, all of its
due chunks leave together (coalesced) and the truth log says so. Schedules are absolute (arrival + TTFT + j·k·ITL),
so a late tick never shifts later chunks; a request's arrival is the kernel's receive stamp of its bytes, so a
request read late (the loop busy with other streams) still counts from when it came in. `--procs N` runs N
processes on one SO_REUSEPORT port (pin them with `taskset`); each writes its own truth file (`PATH.<i>`).

    python -m bench.server --port 8100 --itl-ms 10 --k 4 --truth /tmp/truth.jsonl
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import os
import select
import signal
import socket
import sys
import time
import zlib
from array import array
from pathlib import Path
from typing import Any

import orjson

from loadgen.client.clock import realtime_offset_ns

_WORD_TEXT = (
    "the of and to in is it you that he was for on are with as his they be at one have this from or had "
    "by word but what some we can out other were all there when up use your how said an each she which do "
    "their time if will way"
)
_WORDS = tuple(_WORD_TEXT.split())
_MODELS = b'{"object":"list","data":[{"id":"bench","object":"model","created":0,"owned_by":"bench"}]}'
_EPOLLIN, _EPOLLOUT, _EPOLLERR = select.EPOLLIN, select.EPOLLOUT, select.EPOLLERR | select.EPOLLHUP


class _Stream:
    __slots__ = (
        "conn",
        "req",
        "due",
        "step",
        "left",
        "cum",
        "k",
        "chat",
        "usage_every",
        "include_usage",
        "ptok",
        "head",
    )

    def __init__(self) -> None:
        self.head = True


# Requests are stamped with the kernel's receive time (SO_TIMESTAMPNS, 35 in Linux's generic socket ABI), so a request
# the server read late still counts from when it arrived: the truth TTFT is what a perfect client would see.
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else 0)
_CMSG_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0


class _Conn:
    __slots__ = ("sock", "fd", "inbuf", "out", "stream", "close_after", "want_out", "rx")

    def __init__(self, sock: socket.socket) -> None:
        self.rx = 0.0  # arrival time of the last bytes read (kernel stamp on the monotonic clock)
        self.sock = sock
        self.fd = sock.fileno()
        self.inbuf = bytearray()
        self.out = bytearray()
        self.stream: _Stream | None = None
        self.close_after = False
        self.want_out = False


class BenchServer:
    def __init__(self, args: argparse.Namespace, listener: socket.socket, truth: Path | None) -> None:
        self.itl = args.itl_ms / 1e3
        self.ttft = args.ttft_ms / 1e3
        self.k = max(1, args.k)
        self.default_out = args.output_tokens
        self.force_out = args.force_output_tokens
        self.spin = not args.no_spin
        self.listener = listener
        self.truth_path = truth
        self.ep = select.epoll()
        self.conns: dict[int, _Conn] = {}
        self.heap: list[tuple[float, int, _Stream]] = []
        self.seq = 0
        self.stop = False
        self.tag = f"s{os.getpid()}"
        # Truth: per request (rid, arrival, finish); per token chunk (request index, write time, tokens).
        self.rids: list[str] = []
        self.arrival = array("d")
        # Per request, for peers that send no request id: a fingerprint of the prompt text (crc32) to match their
        # per-request output by, the prompt's words (its tokens: every word is one in the bench tokenizer) and the
        # max_tokens asked for (the workload-parity checks).
        self.pkey = array("L")
        self.pwords = array("i")
        self.asked = array("i")
        self.finish = array("d")
        self.c_req = array("i")
        self.c_t = array("d")
        self.c_n = array("i")
        self.late = array("d")  # how late each write was against its schedule
        self.idle_s = 0.0  # time spent waiting in epoll (spinning polls count as busy)
        self.started = time.monotonic()
        self.texts = [
            [(" " + " ".join(_WORDS[(i + j) % len(_WORDS)] for j in range(n))).encode() for i in range(len(_WORDS))]
            for n in range(self.k + 1)
        ]

    # ---- HTTP in ----
    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except BlockingIOError:
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if _SO_TIMESTAMPNS:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            c = _Conn(sock)
            self.conns[c.fd] = c
            self.ep.register(c.fd, _EPOLLIN)

    def _read(self, c: _Conn) -> None:
        try:
            data, anc, _, _ = c.sock.recvmsg(65536, _CMSG_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(c)
            return
        if not data:
            self._close(c)
            return
        now = time.monotonic()
        c.rx = now
        if anc and anc[0][1] == _SO_TIMESTAMPNS and len(anc[0][2]) == 16:
            sec, nsec = int.from_bytes(anc[0][2][:8], sys.byteorder), int.from_bytes(anc[0][2][8:], sys.byteorder)
            stamp = (sec * 1_000_000_000 + nsec - realtime_offset_ns()[0]) * 1e-9
            if now - 5.0 < stamp <= now:
                c.rx = stamp
        c.inbuf += data
        if c.stream is None:
            self._next_request(c)

    def _next_request(self, c: _Conn) -> None:
        while c.stream is None and not c.close_after:
            buf = c.inbuf
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(buf[:end]).decode("latin-1").split("\r\n")
            try:
                method, target, version = head[0].split(" ", 2)
            except ValueError:
                self._close(c)
                return
            headers = {}
            for line in head[1:]:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0") or 0)
            if len(buf) < end + 4 + length:
                return
            body = bytes(buf[end + 4 : end + 4 + length])
            del buf[: end + 4 + length]
            conn_hdr = headers.get("connection", "").lower()
            c.close_after = conn_hdr == "close" or (version == "HTTP/1.0" and conn_hdr != "keep-alive")
            self._handle(c, method, target.split("?", 1)[0], headers, body)

    def _handle(self, c: _Conn, method: str, path: str, headers: dict[str, str], body: bytes) -> None:
        now = c.rx or time.monotonic()  # when the request's last bytes arrived
        if method == "GET" and path in ("/health", "/v1/models", "/models"):
            self._respond(c, 200, b"ok" if path == "/health" else _MODELS)
            return
        if method != "POST" or path not in ("/v1/chat/completions", "/v1/completions"):
            self._respond(c, 404, b'{"error":{"message":"not found"}}')
            return
        try:
            req = orjson.loads(body) if body else {}
        except orjson.JSONDecodeError:
            self._respond(c, 400, b'{"error":{"message":"bad json"}}')
            return
        chat = path == "/v1/chat/completions"
        n_out = self.force_out or int(req.get("max_tokens") or req.get("max_completion_tokens") or self.default_out)
        prompt = _prompt_text(req)
        ptok = max(1, len(prompt.split()))
        rid = headers.get("x-request-id") or f"{self.tag}-{len(self.rids)}"
        idx = len(self.rids)
        self.rids.append(rid)
        self.arrival.append(now)
        self.finish.append(0.0)
        self.pkey.append(zlib.crc32(prompt.encode()))
        self.pwords.append(ptok)
        self.asked.append(int(req.get("max_tokens") or req.get("max_completion_tokens") or 0))
        if not req.get("stream"):
            text = " ".join(_WORDS[i % len(_WORDS)] for i in range(n_out))
            usage = {"prompt_tokens": ptok, "completion_tokens": n_out, "total_tokens": ptok + n_out}
            if chat:
                choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            else:
                choice = {"index": 0, "text": text, "finish_reason": "length"}
            obj = {
                "id": "cmpl-bench",
                "object": "chat.completion" if chat else "text_completion",
                "created": 0,
                "model": "bench",
                "choices": [choice],
                "usage": usage,
            }
            self.finish[idx] = now
            self._respond(c, 200, orjson.dumps(obj))
            return
        opts = req.get("stream_options") or {}
        st = _Stream()
        st.conn, st.req, st.left, st.cum, st.k, st.chat, st.ptok = c, idx, max(1, n_out), 0, self.k, chat, ptok
        st.include_usage = bool(opts.get("include_usage"))
        st.usage_every = bool(opts.get("continuous_usage_stats"))
        st.step = self.k * self.itl
        st.due = now + self.ttft
        c.stream = st
        self.seq += 1
        heapq.heappush(self.heap, (st.due, self.seq, st))

    def _respond(self, c: _Conn, status: int, body: bytes) -> None:
        reason = {200: "OK", 400: "Bad Request", 404: "Not Found"}[status]
        head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        if c.close_after:
            head += "Connection: close\r\n"
        self._send(c, head.encode() + b"\r\n" + body)
        if c.close_after and not c.out:
            self._close(c)

    # ---- stream out ----
    def _chunk(self, st: _Stream, n: int, last: bool) -> bytes:
        text = self.texts[n][st.cum % len(_WORDS)]
        usage = b""
        if st.usage_every:
            usage = b',"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}' % (
                st.ptok,
                st.cum,
                st.ptok + st.cum,
            )
        fin = b'"length"' if last else b"null"
        if st.chat:
            ev = (
                b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"bench",'
                b'"choices":[{"index":0,"delta":{"content":"%s"},"logprobs":null,"finish_reason":%s}]%s}\n\n'
                % (text, fin, usage)
            )
        else:
            ev = (
                b'data: {"id":"cmpl-bench","object":"text_completion","created":0,"model":"bench",'
                b'"choices":[{"index":0,"text":"%s","logprobs":null,"finish_reason":%s}]%s}\n\n' % (text, fin, usage)
            )
        return ev

    def _emit(self, st: _Stream, now: float) -> None:
        parts = []
        ns = []
        if st.head:
            st.head = False
            parts.append(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
            )
            if st.chat:
                role = (
                    b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"bench",'
                    b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
                    b'"finish_reason":null}]%s}\n\n'
                ) % (
                    b',"usage":{"prompt_tokens":%d,"completion_tokens":0,"total_tokens":%d}' % (st.ptok, st.ptok)
                    if st.usage_every
                    else b""
                )
                parts.append(b"%x\r\n%s\r\n" % (len(role), role))
        late = now - st.due
        while True:
            n = st.k if st.left > st.k else st.left
            st.cum += n
            st.left -= n
            ns.append(n)
            last = st.left == 0
            ev = self._chunk(st, n, last)
            if last:
                if st.include_usage:
                    ev += (
                        b'data: {"id":"bench","object":"chat.completion.chunk","created":0,"model":"bench",'
                        b'"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}\n\n'
                        % (st.ptok, st.cum, st.ptok + st.cum)
                    )
                ev += b"data: [DONE]\n\n"
                parts.append(b"%x\r\n%s\r\n0\r\n\r\n" % (len(ev), ev))
                break
            parts.append(b"%x\r\n%s\r\n" % (len(ev), ev))
            st.due += st.step
            if st.due > now:
                break
        c = st.conn
        t = time.monotonic()
        self._send(c, b"".join(parts))
        req = st.req
        c_req, c_t, c_n = self.c_req, self.c_t, self.c_n
        for n in ns:
            c_req.append(req)
            c_t.append(t)
            c_n.append(n)
        self.late.append(late)
        if st.left:
            self.seq += 1
            heapq.heappush(self.heap, (st.due, self.seq, st))
        else:
            self.finish[req] = t
            c.stream = None
            if c.close_after:
                if not c.out:
                    self._close(c)
            elif c.inbuf:
                self._next_request(c)

    def _send(self, c: _Conn, data: bytes) -> None:
        if c.sock is None:
            return
        if c.out:
            c.out += data
            return
        try:
            sent = c.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(c)
            return
        if sent < len(data):
            c.out += data[sent:]
            if not c.want_out:
                c.want_out = True
                self.ep.modify(c.fd, _EPOLLIN | _EPOLLOUT)

    def _flush(self, c: _Conn) -> None:
        try:
            sent = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(c)
            return
        del c.out[:sent]
        if not c.out:
            c.want_out = False
            self.ep.modify(c.fd, _EPOLLIN)
            if c.close_after and c.stream is None:
                self._close(c)

    def _close(self, c: _Conn) -> None:
        if c.sock is None:
            return
        self.conns.pop(c.fd, None)
        with contextlib.suppress(OSError):
            self.ep.unregister(c.fd)
        c.sock.close()
        c.sock = None  # type: ignore[assignment]
        if c.stream is not None:
            st, c.stream = c.stream, None
            st.left = 0
            self.finish[st.req] = -time.monotonic()  # aborted

    # ---- loop ----
    def run(self) -> None:
        lfd = self.listener.fileno()
        self.ep.register(lfd, _EPOLLIN)
        heap, conns, poll, mono = self.heap, self.conns, self.ep.poll, time.monotonic
        while not self.stop:
            if heap:
                wait = heap[0][0] - mono()
                # epoll has millisecond resolution (and Python rounds up): sleep whole milliseconds, then spin.
                timeout = int(wait * 1e3) / 1e3 if wait > 0 else 0.0
                if timeout == 0.0 and wait > 0 and not self.spin:
                    timeout = 0.001
            else:
                timeout = 0.05
            t_idle = mono()
            try:
                events = poll(timeout, 4096)
            except InterruptedError:
                continue
            t_wake = mono()
            self.idle_s += t_wake - t_idle
            for fd, ev in events:
                if fd == lfd:
                    self._accept()
                    continue
                c = conns.get(fd)
                if c is None:
                    continue
                if ev & _EPOLLOUT:
                    self._flush(c)
                if ev & _EPOLLIN:
                    self._read(c)
                elif ev & _EPOLLERR:
                    self._close(c)
            if heap:
                now = mono()
                while heap and heap[0][0] <= now:
                    st = heapq.heappop(heap)[2]
                    if st.left and st.conn.sock is not None:
                        self._emit(st, now)

    def dump(self) -> dict[str, object]:
        lines = []
        dumps = orjson.dumps
        for i, rid in enumerate(self.rids):
            lines.append(
                dumps(
                    {
                        "rid": rid,
                        "variant": "bench",
                        "kind": "arrival",
                        "t": self.arrival[i],
                        "key": f"{self.pkey[i]:08x}",
                        "prompt_words": self.pwords[i],
                        "max_tokens": self.asked[i],
                    }
                )
            )
        for r, t, n in zip(self.c_req, self.c_t, self.c_n, strict=True):
            lines.append(dumps({"rid": self.rids[r], "variant": "bench", "t": t, "n": n, "kind": "token"}))
        for i, rid in enumerate(self.rids):
            f = self.finish[i]
            if f > 0:
                lines.append(dumps({"rid": rid, "variant": "bench", "kind": "finish", "t": f}))
            elif f < 0:
                lines.append(dumps({"rid": rid, "variant": "bench", "kind": "abort", "t": -f}))
        if self.truth_path is not None:
            self.truth_path.write_bytes(b"\n".join(lines) + b"\n")
        late = sorted(self.late)
        cpu = os.times()
        return {
            "requests": len(self.rids),
            "chunks": len(self.c_t),
            "late_p50_ms": late[len(late) // 2] * 1e3 if late else 0.0,
            "late_p99_ms": late[int(len(late) * 0.99)] * 1e3 if late else 0.0,
            "cpu_s": cpu.user + cpu.system,
            "busy_fraction": 1.0 - self.idle_s / max(time.monotonic() - self.started, 1e-9),
        }


def _prompt_text(req: dict[str, Any]) -> str:
    """The prompt as the client wrote it: a completion's `prompt`, or a chat's message contents joined by newlines."""
    prompt = req.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return "\n".join(p for p in prompt if isinstance(p, str))
    parts = []
    for m in req.get("messages") or []:
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [c["text"] for c in content if isinstance(c, dict) and isinstance(c.get("text"), str)]
    return "\n".join(parts)


def prompt_key(text: str) -> str:
    """The fingerprint the truth log's arrival carries for a prompt text (match a peer's request by it)."""
    return f"{zlib.crc32(text.encode()):08x}"


def _listener(host: str, port: int, reuseport: bool) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuseport:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    s.bind((host, port))
    s.listen(4096)
    s.setblocking(False)
    return s


def _serve_one(args: argparse.Namespace, index: int) -> None:
    truth = Path(args.truth) if args.truth else None
    if truth is not None and args.procs > 1:
        truth = truth.with_name(f"{truth.name}.{index}")
    server = BenchServer(args, _listener(args.host, args.port, args.procs > 1), truth)

    def _stop(*_: object) -> None:
        server.stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if args.ready_file and index == 0:
        Path(args.ready_file).write_text(str(os.getpid()))
    server.run()
    stats = server.dump()
    if args.stats:
        path = Path(args.stats) if args.procs == 1 else Path(f"{args.stats}.{index}")
        path.write_bytes(orjson.dumps(stats))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--itl-ms", type=float, default=10.0, help="time per token")
    p.add_argument("--ttft-ms", type=float, default=20.0, help="time from request to first token chunk")
    p.add_argument("--k", type=int, default=1, help="tokens per chunk")
    p.add_argument("--output-tokens", type=int, default=64, help="when the request has no max_tokens")
    p.add_argument("--force-output-tokens", type=int, default=0, help="ignore max_tokens; always this many")
    p.add_argument("--procs", type=int, default=1, help="processes sharing the port (SO_REUSEPORT)")
    p.add_argument("--no-spin", action="store_true", help="sleep in whole ms instead of spinning to the due time")
    p.add_argument("--truth", default="", help="write the truth log (JSONL) here at exit")
    p.add_argument("--stats", default="", help="write server stats (JSON) here at exit")
    p.add_argument("--ready-file", default="", help="written once the port is bound")
    args = p.parse_args(argv)
    if args.procs <= 1:
        _serve_one(args, 0)
        return 0
    children = []
    for i in range(args.procs):
        pid = os.fork()
        if pid == 0:
            try:
                _serve_one(args, i)
            finally:
                os._exit(0)
        children.append(pid)

    def _forward(signum: int, _: object) -> None:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signum)

    signal.signal(signal.SIGTERM, _forward)
    signal.signal(signal.SIGINT, _forward)
    for pid in children:
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
            except ChildProcessError:
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
