"""Micro-benchmarks of loadgen's per-chunk and per-request work, without a network (CPU only, µs per item).

- `http+sse+json`: one SSE chunk through the HTTP parser (llhttp, chunked framing), the SSE splitter, the dialect's
  JSON parse and the accumulator (what happens after every `recv()` on a quiet connection);
- `same, 8 chunks per recv`: the same when reads are coalesced (a busy client finds several chunks per read);
- `C counter`: the same chunks counted by loadgen/protocol/_wire.c's TokenChunkCounter (framing, JSON check,
  accounting into the record) — what a token read costs where the C half is built (the Python path stays for heads,
  ends and odd chunks);
- `aggregate.add`: recording one finished request (TTFT, E2E, TPOT, per-token ITL, ICL) into the histograms;
- `merge`: the master adding one worker's encoded histogram (`merge_encoded_into`), and hdrh's own `decode_and_add`
  for comparison;
- `request setup`: drawing the next request, building its body and record (what precedes every send); with
  `tracing:`, plus the request's `traceparent` (protocol/traceparent.py: a random id, its header line).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

from hdrh.histogram import HdrHistogram

from bench.server import _WORDS
from loadgen.client.connection import _Parser
from loadgen.config.scenario import validate_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.hist_merge import merge_encoded_into
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.records import RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator, fast_path_available
from loadgen.protocol.dialects import get_dialect
from loadgen.protocol.traceparent import TraceContext
from loadgen.traffic.sampler import sampler_for

_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _event(i: int) -> bytes:
    ev = (
        b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":0,"model":"bench","choices":'
        b'[{"index":0,"delta":{"content":" %s"},"logprobs":null,"finish_reason":null}],'
        b'"usage":{"prompt_tokens":32,"completion_tokens":%d,"total_tokens":%d}}\n\n'
        % (_WORDS[i % len(_WORDS)].encode(), i, 32 + i)
    )
    return b"%x\r\n%s\r\n" % (len(ev), ev)


ROUNDS = 7


def _timeit(fn: Callable[[], int], min_s: float = 0.15) -> float:
    """µs per item, the median of ROUNDS rounds of at least `min_s` each: fn() does some work and returns how many
    items it did. On a shared VM one long round takes whatever a neighbour did meanwhile; the median of short ones
    does not."""
    fn()  # warm
    per_item = []
    for _ in range(ROUNDS):
        items = 0
        t0 = time.perf_counter()
        while True:
            items += fn()
            el = time.perf_counter() - t0
            if el >= min_s:
                per_item.append(el / items * 1e6)
                break
    return statistics.median(per_item)


def bench_parse(chunks: int = 64, per_recv: int = 1) -> float:
    dialect = get_dialect("openai-chat")
    events = [_event(i + 1) for i in range(chunks)]
    reads = [_HEAD + events[0]] + [b"".join(events[i : i + per_recv]) for i in range(1, chunks, per_recv)]
    reads[-1] += b"0\r\n\r\n"

    def one() -> int:
        rec = RequestRecord("r", "v", "m")
        acc = StreamAccumulator(rec, dialect)
        p = _Parser(acc)
        for data in reads:
            p.now = time.monotonic()
            p.parse(data)
        return chunks

    return _timeit(one)


def bench_chunk_counter(chunks: int = 64, per_recv: int = 1) -> float:
    from loadgen.protocol import _wire

    events = [_event(i + 1) for i in range(chunks)]
    reads = [b"".join(events[i : i + per_recv]) for i in range(0, chunks, per_recv)]

    def one() -> int:
        rec = RequestRecord("r", "v", "m")
        counter = _wire.TokenChunkCounter(rec, True, "server")
        counter.arm(0, -1)
        try_count = counter.try_count
        for data in reads:
            if not try_count(1.0, data):
                raise RuntimeError("the counter refused a bench chunk")
        return chunks

    return _timeit(one)


def bench_aggregate(chunks: int = 64, k: int = 1) -> tuple[float, float]:
    agg = Aggregate()
    recs = []
    for j in range(200):
        r = RequestRecord(f"r{j}", "v", "m", sent=100.0 + j)
        t = 100.02 + j
        for i in range(chunks):
            r.chunk_times.append(t + i * 0.01 * k + (i % 7) * 1e-5)
            r.chunk_tokens.append(k)
        r.done = r.chunk_times[-1]
        r.output_tokens = chunks * k
        recs.append(r)

    def one() -> int:
        for r in recs:
            agg.add(r, 1000.0)
        return len(recs)

    per_req = _timeit(one)
    return per_req, per_req / chunks


def bench_merge() -> tuple[float, float]:
    """µs per blob: 20 encoded histograms of 200 latencies each (a worker's interval for one group), added to two
    targets (ITL and its ICL alias) by `merge_encoded_into`, and by hdrh's `decode_and_add` per target."""
    rng = random.Random(1)
    blobs = []
    for _ in range(20):
        part = LatencyHistogram()
        for _ in range(200):
            part.record(rng.lognormvariate(-3, 1))
        blobs.append(part.encode())
    targets = (LatencyHistogram(), LatencyHistogram())

    def ours() -> int:
        for blob in blobs:
            merge_encoded_into(blob, targets)
        return len(blobs)

    hdrh_targets = (HdrHistogram(1, 3_600_000_000, 3), HdrHistogram(1, 3_600_000_000, 3))

    def hdrh() -> int:
        for blob in blobs:
            for t in hdrh_targets:
                t.decode_and_add(blob)
        return len(blobs)

    return _timeit(ours), _timeit(hdrh)


def bench_request_setup(tracing: bool = False) -> float:
    scen = validate_scenario(
        {
            "name": "b",
            "variants": [{"name": "v", "base_url": "http://127.0.0.1:1", "model": "m"}],
            "traffic": {"mixes": [{"name": "chat"}]},
        },
        source="bench",
    )
    sampler = sampler_for(scen, 0)
    dialect = get_dialect("openai-chat")
    trace = TraceContext(0.1) if tracing else None

    def one() -> int:
        for _ in range(100):
            spec = sampler.next()
            rec = RequestRecord(f"x-{spec.index}", "v", spec.mix, spec.bucket, max_tokens=spec.max_tokens)
            StreamAccumulator(rec, dialect)
            dialect.build_body(spec, "m", True)
            if trace is not None:  # (as RequestStream.send_next adds it)
                rec.traceparent = traceparent = trace.next()
                b"X-Request-Id: x\r\n" + b"traceparent: " + traceparent.encode() + b"\r\n"
        return 100

    return _timeit(one)


def run() -> list[tuple[str, str]]:
    rows = [
        ("http+sse+json+record, 1 chunk per recv (µs/chunk)", f"{bench_parse(per_recv=1):.2f}"),
        ("same, 8 chunks per recv (µs/chunk)", f"{bench_parse(per_recv=8):.2f}"),
    ]
    if fast_path_available():
        rows.append(("C counter, 1 chunk per recv (µs/chunk)", f"{bench_chunk_counter(per_recv=1):.2f}"))
        rows.append(("C counter, 8 chunks per recv (µs/chunk)", f"{bench_chunk_counter(per_recv=8):.2f}"))
    req, chunk = bench_aggregate(k=1)
    rows.append(("aggregate.add, 64 chunks × 1 token (µs/request; µs/chunk)", f"{req:.1f}; {chunk:.2f}"))
    req, chunk = bench_aggregate(k=4)
    rows.append(("aggregate.add, 64 chunks × 4 tokens (µs/request; µs/chunk)", f"{req:.1f}; {chunk:.2f}"))
    ours, hdrh = bench_merge()
    rows.append(("merge_encoded_into, 2 targets (µs/blob; hdrh decode_and_add)", f"{ours:.1f}; {hdrh:.1f}"))
    rows.append(("request setup: next spec + record + body (µs/request)", f"{bench_request_setup():.1f}"))
    rows.append(("same + traceparent (`tracing:`) (µs/request)", f"{bench_request_setup(tracing=True):.1f}"))
    return rows


if __name__ == "__main__":
    from bench.common import machine_info, write_results

    # Before the work: the load average is the machine's, not ours.
    machine = machine_info()
    rows = run()
    for name, value in rows:
        print(f"{name:64s} {value}")
    kept = write_results("hotpath", {"rows": rows, "c_half": fast_path_available(), "rounds": ROUNDS}, machine)
    print(f"(results: {kept})")
