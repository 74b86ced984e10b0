"""Long contexts stay cheap to send (issue 33, item 6): a 131,072-token (128k) prompt, built and sent on loadgen's
real path, must not stall the worker's loop or its other streams.

Two prompts of 128k tokens (word approximation: one pool word is one token, as without a `tokenizer:`):

- *plain*: one user message, the sampler's next request of a custom mix whose only bucket is 131,072 tokens;
- *agent step*: a session's whole growing context as `traffic/sessions.py`'s `Conversation` builds it — a 4,096-token
  opening turn, then per step the model's reply (200 words; every other step a tool call, whose result is the next
  message) and a 1,000–3,000-token user or tool message, ~120 messages in all: the step timed is the one whose history
  passes 131,072 tokens (`Conversation.reply`, which also joins the history as one prompt for raw-prompt dialects).

Rows:

- **construction** (CPU only, no network), µs per request, p50 / p99 / max over many requests: drawing the spec (the
  sampler, or `Conversation.reply`), the request's record and reader, the dialect's `build_body`, and the request's
  bytes (head, `X-Request-Id`, `Content-Length` and body joined as `StreamConnection.post_stream` does), for
  openai-chat, openai-completions, anthropic-messages and openai-responses. Target: p99 ≤ 5 ms.
- **send** (`bench/server.py` on 127.0.0.1 pinned to core 0, this process on core 1; 10 ms TTFT, 16 tokens at 5 ms):
  two senders send 128k requests back to back through `RequestStream.send_next` (openai-chat) while 16 short chat
  streams run beside them. Per 128k request: *decide → last byte written*, from the moment the sender decides to send
  (before drawing the spec, or before `Conversation.reply`) to the return of `StreamConnection._send` (stamped by
  wrapping it here), and *write* alone (loadgen's `sent` stamp to that return). *Added TTFT* as `bench/` measures it
  elsewhere: loadgen's TTFT minus the truth's (first token write − the kernel's receive stamp of the request's last
  bytes), request by request (`X-Request-Id`); for the 128k requests themselves, and for the short streams alone
  and while the 128k requests go out. Target: added TTFT p99 ≤ 1 ms at 128k.

`python -m bench.longcontext [--seconds 8] [--requests 400]` writes bench/results/longcontext.json.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import copy
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import gevent
import orjson

from bench.common import Cores, bench_server, quantile
from loadgen.client.connection import StreamConnection
from loadgen.config.scenario import Scenario, validate_scenario
from loadgen.locust_plugin.request_stream import RequestStream
from loadgen.measure.records import RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect
from loadgen.traffic.sampler import RequestSampler, sampler_for
from loadgen.traffic.sessions import Conversation

TOKENS = 131_072
OPENING = 4_096
FOLLOW_UP = (1_000, 3_000)
REPLY = " ".join(["done"] * 200)
DIALECTS = ("openai-chat", "openai-completions", "anthropic-messages", "openai-responses")
HEAD = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\n"
    b"Accept: text/event-stream\r\nUser-Agent: loadgen\r\n"
)


def _scenario(base_url: str, mix: str, *, output: int = 16) -> Scenario:
    """One openai-chat variant; `mix`: "plain" (128k, one message), "session" (sessions from a 4k opening turn) or
    "chat" (the built-in mix: the short streams)."""
    traffic: dict[str, Any]
    if mix == "chat":
        traffic = {"mixes": [{"name": "chat"}]}
    else:
        first = TOKENS if mix == "plain" else OPENING
        traffic = {
            "custom_mixes": {
                mix: {"buckets": [{"name": "l", "prompt_tokens": [first, first]}], "output_tokens": [output, output]}
            },
            "mixes": [
                {
                    "name": mix,
                    **({"sessions": {"turns": 500, "follow_up_tokens": list(FOLLOW_UP)}} if mix == "session" else {}),
                }
            ],
        }
    return validate_scenario(
        {"name": "longcontext", "variants": [{"name": "v", "base_url": base_url, "model": "m"}], "traffic": traffic},
        source="bench",
    )


def _tool_call(step: int) -> dict[str, str] | None:
    return {"id": f"call_{step}", "name": "read_file", "arguments": '{"path": "src/app.py"}'} if step % 2 else None


def _near_full(sampler: RequestSampler) -> tuple[Conversation, int]:
    """A session advanced to its last step below 128k tokens (untimed), and its step count."""
    conv = Conversation(sampler, sampler.next())
    step = 0
    while True:
        probe = _fork(conv)
        spec = probe.reply(REPLY, 200, _tool_call(step))
        assert spec is not None
        if spec.prompt_tokens >= TOKENS:
            return conv, step
        conv.reply(REPLY, 200, _tool_call(step))
        step += 1


def _fork(conv: Conversation) -> Conversation:
    """A copy whose next step does not change `conv` (the bench times the same 128k step many times)."""
    fork = copy.copy(conv)
    fork._messages = list(conv._messages)  # noqa: SLF001 - a bench's copy, not loadgen's API
    return fork


def _percentiles(values: list[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": quantile(values, 0.5),
        "p99": quantile(values, 0.99),
        "max": max(values) if values else float("nan"),
    }


def construction(requests: int) -> list[dict[str, Any]]:
    """µs per request, building a 128k request (plain and agent step) for each dialect."""
    rows = []
    plain = sampler_for(_scenario("http://127.0.0.1:1", "plain"), 0)
    agent = sampler_for(_scenario("http://127.0.0.1:1", "session"), 0)
    conv, steps = _near_full(agent)
    for name in DIALECTS:
        dialect = get_dialect(name)
        for kind in ("plain", "agent step"):
            times: list[float] = []
            size = messages = tokens = 0
            for i in range(requests + 20):
                fork = _fork(conv) if kind == "agent step" else None
                t0 = time.perf_counter()
                if fork is None:
                    spec = plain.next()
                else:
                    got = fork.reply(REPLY, 200, _tool_call(steps))
                    assert got is not None
                    spec = got
                rec = RequestRecord(f"w-v-0-{spec.index}", "v", spec.mix, spec.bucket, max_tokens=spec.max_tokens)
                StreamAccumulator(rec, dialect)
                body = dialect.build_body(spec, "m", True)
                extra = b"X-Request-Id: " + rec.request_id.encode() + b"\r\n"
                request = b"".join((HEAD, extra, b"Content-Length: %d\r\n\r\n" % len(body), body))
                t1 = time.perf_counter()
                if i >= 20:  # the first ones warm the allocator
                    times.append((t1 - t0) * 1e6)
                size, tokens = len(request), spec.prompt_tokens
                messages = len(spec.messages or ()) or (2 if spec.system_prompt else 1)
            rows.append(
                {"dialect": name, "prompt": kind, "tokens": tokens, "messages": messages, "bytes": size}
                | {f"{k}_us": v for k, v in _percentiles(times).items() if k != "n"}
                | {"n": len(times)}
            )
    return rows


# The send's end, per connection: `StreamConnection._send` returns once the request's last byte is written.
_WRITTEN: dict[int, float] = {}


@contextlib.contextmanager
def _stamp_writes() -> Iterator[None]:
    original = StreamConnection._send

    def timed(self: StreamConnection, sock: Any, request: bytes, may_be_stale: bool) -> None:
        original(self, sock, request, may_be_stale)
        _WRITTEN[id(self)] = time.monotonic()

    StreamConnection._send = timed  # type: ignore[method-assign]
    try:
        yield
    finally:
        StreamConnection._send = original  # type: ignore[method-assign]


def _truth(path: Path) -> dict[str, list[float]]:
    """Per request id, in arrival order: the truth's TTFT (first token write − arrival, the kernel's stamp of the
    request's last bytes). An agent-step sender sends the same step again and again under the same id, one after
    another on its connection: its request k's first token is the id's first token written after arrival k."""
    arrivals: dict[str, list[float]] = {}
    tokens: dict[str, list[float]] = {}
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        r = orjson.loads(line)
        if r["kind"] == "arrival":
            arrivals.setdefault(r["rid"], []).append(r["t"])
        elif r["kind"] == "token":
            tokens.setdefault(r["rid"], []).append(r["t"])
    out: dict[str, list[float]] = {}
    for rid, ts in arrivals.items():
        writes = sorted(tokens.get(rid, ()))
        firsts = [bisect.bisect_left(writes, a) for a in sorted(ts)]
        out[rid] = [writes[i] - a for i, a in zip(firsts, sorted(ts), strict=True) if i < len(writes)]
    return out


def send(seconds: float, long_kind: str | None, tmp: Path) -> dict[str, Any]:
    """16 short chat streams for `seconds`, with two senders of 128k requests (`long_kind`: "plain" or "agent step")
    beside them, or (None) alone."""
    cores = Cores()
    out: dict[str, Any] = {"long": long_kind}
    work = tmp / (long_kind or "alone").replace(" ", "-")
    with bench_server(work, cores, itl_ms=5.0, k=1, ttft_ms=10.0, output_tokens=16, force_output=True) as server:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, {int(cores.client)})
        short_scen = _scenario(server.base_url, "chat")
        short = [RequestStream(short_scen, short_scen.variants[0], i, "short") for i in range(16)]
        longs: list[RequestStream] = []
        convs: list[tuple[Conversation, int]] = []
        if long_kind is not None:
            scen = _scenario(server.base_url, "plain" if long_kind == "plain" else "session")
            longs = [RequestStream(scen, scen.variants[0], 1000 + i, "long") for i in range(2)]
            if long_kind == "agent step":
                convs = [_near_full(s.sampler) for s in longs]
        short_recs: list[RequestRecord] = []
        long_rows: list[tuple[RequestRecord, float, float]] = []  # (record, decided, written)
        end = time.monotonic() + seconds

        def run_short(stream: RequestStream) -> None:
            while time.monotonic() < end:
                short_recs.append(stream.send_next(0.0))

        def run_long(i: int) -> None:
            stream = longs[i]
            while time.monotonic() < end:
                if convs:
                    conv, steps = convs[i]
                    fork = _fork(conv)
                    decided = time.monotonic()
                    spec = fork.reply(REPLY, 200, _tool_call(steps))
                    rec = stream.send_next(0.0, spec=spec)
                else:
                    decided = time.monotonic()
                    rec = stream.send_next(0.0)
                long_rows.append((rec, decided, _WRITTEN[id(stream._conn)]))  # noqa: SLF001
                gevent.sleep(0)

        with _stamp_writes():
            jobs: list[gevent.Greenlet] = [gevent.spawn(run_short, s) for s in short]
            jobs += [gevent.spawn(run_long, i) for i in range(len(longs))]
            gevent.joinall(jobs, raise_error=True)
        for s in (*short, *longs):
            s.close()
    truth = _truth(server.truth)

    warm = end - seconds + 1.0  # the first second opens the connections

    def added(recs: list[RequestRecord]) -> dict[str, float]:
        seen: dict[str, int] = {}
        diffs = []
        for r in recs:  # each id's records in send order (one stream sends them one after another)
            k = seen[r.request_id] = seen.get(r.request_id, -1) + 1
            ttfts = truth.get(r.request_id, [])
            if r.ok and r.ttft is not None and k < len(ttfts) and r.sent > warm:
                diffs.append((r.ttft - ttfts[k]) * 1e3)
        return _percentiles(diffs)

    out["short_requests"] = len(short_recs)
    out["short_added_ttft_ms"] = added(short_recs)
    out["server_late_p99_ms"] = server.stats.get("late_p99_ms")
    if long_rows:
        ok = [(r, d, w) for r, d, w in long_rows if r.ok and d > warm]
        out["long_requests"] = len(long_rows)
        out["long_failed"] = sum(1 for r, _, _ in long_rows if not r.ok)
        out["long_prompt_tokens"] = ok[0][0].prompt_tokens_target if ok else None
        out["long_decide_to_written_ms"] = _percentiles([(w - d) * 1e3 for _, d, w in ok])
        out["long_decide_to_sent_ms"] = _percentiles([(r.sent - d) * 1e3 for r, d, _ in ok])
        out["long_write_ms"] = _percentiles([(w - r.sent) * 1e3 for r, _, w in ok])
        out["long_added_ttft_ms"] = added([r for r, _, _ in long_rows])
    return out


def _fmt(p: dict[str, float], unit: Callable[[float], str] = lambda v: f"{v:.3f}") -> str:
    return f"{unit(p['p50'])} / {unit(p['p99'])} (max {unit(p['max'])}, n={p['n']})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="each send run's length")
    ap.add_argument("--requests", type=int, default=400, help="construction: requests timed per dialect and prompt")
    args = ap.parse_args()

    from bench.common import machine_info, write_results

    machine = machine_info()  # before the work: the load average is the machine's, not ours
    print(f"CPU: {machine['cpu_model']} ({machine['cores']} cores), Python {machine['python']}")
    built = construction(args.requests)
    print(f"\nconstruction of a {TOKENS:,}-token request (µs: p50 / p99 / max; target p99 ≤ 5,000 µs)")
    for r in built:
        print(
            f"  {r['dialect']:20s} {r['prompt']:11s} {r['messages']:4d} msgs {r['bytes'] / 1e3:6.0f} kB   "
            f"{r['p50_us']:7.0f} / {r['p99_us']:7.0f} / {r['max_us']:7.0f}"
        )
    sends = []
    with tempfile.TemporaryDirectory(prefix="longcontext-") as tmp:
        for kind in (None, "plain", "agent step"):
            res = send(args.seconds, kind, Path(tmp))
            sends.append(res)
            label = "16 short streams alone" if kind is None else f"16 short streams + 2 senders of 128k {kind}s"
            print(f"\n{label} (ms: p50 / p99; server late p99 {res['server_late_p99_ms']} ms)")
            print(f"  short streams' added TTFT        {_fmt(res['short_added_ttft_ms'])}")
            if kind is not None:
                print(f"  128k: decide → last byte written {_fmt(res['long_decide_to_written_ms'])}")
                print(f"  128k: decide → sent (building)   {_fmt(res['long_decide_to_sent_ms'])}")
                print(f"  128k: write alone (sent → last)  {_fmt(res['long_write_ms'])}")
                print(f"  128k: added TTFT                 {_fmt(res['long_added_ttft_ms'])}")
                if res["long_failed"]:
                    print(f"  ({res['long_failed']} of {res['long_requests']} 128k requests failed)")
    kept = write_results(
        "longcontext",
        {"tokens": TOKENS, "construction": built, "send": sends, "seconds": args.seconds},
        machine,
    )
    print(f"\n(results: {kept})")


if __name__ == "__main__":
    main()
