"""Capacity: the most a client sustains on one core while its own event-loop lag stays low, and scale-out.

Offered load is raised step by step (streams × 1000 / ITL chunks per second) until loadgen's loop lag p99 reaches
the bound; the best throughput still under it is loadgen's capacity. Throughput is what the server's truth log
shows in the steady state (after the ramp, before the end), so every client is counted the same way.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench.common import Cores, bench_server, fmt, print_table
from bench.grading import Truth
from bench.runners import CLIENTS, Job, Result

LAG_BOUND_MS = 5.0


@dataclass
class CapacityRow:
    label: str
    client: str
    streams: int
    itl_ms: float
    output_tokens: int
    offered_chunks_s: float
    chunks_s: float
    requests_s: float
    cpu: float
    lag_p99: float | None
    server_late_p99: float
    note: str = ""
    ttft_paired_p99: float | None = None
    k: int = 1  # tokens per chunk


def measure(
    client: str,
    label: str,
    streams: int,
    itl_ms: float,
    output_tokens: int,
    seconds: float,
    cores: Cores,
    workdir: Path,
    *,
    workers: int = 0,
    raw: bool = False,
    k: int = 1,
) -> CapacityRow:
    wd = workdir / f"cap-{label}-{client}-{streams}-{itl_ms:g}-{output_tokens}-w{workers}-k{k}"
    with bench_server(
        wd, cores, itl_ms=itl_ms, k=k, ttft_ms=1.0, output_tokens=output_tokens, force_output=True
    ) as srv:
        job = Job(
            srv.base_url,
            streams,
            output_tokens,
            seconds,
            wd,
            cores,
            workers=workers,
            raw=raw,
            itl_ms=itl_ms,
            ttft_ms=1.0,
            # loadgen's loop lag is read over the steady state, as the throughput is (not while users spawn)
            warmup_s=1.0,
        )
        res: Result = CLIENTS[client](job)
    truth = Truth.load(srv.truth)
    res.graded(truth if raw else None)
    per_req = 1e-3 + output_tokens * itl_ms / 1e3
    return CapacityRow(
        label,
        res.client,
        streams,
        itl_ms,
        output_tokens,
        streams * -(-output_tokens // k) / per_req,
        truth.chunks_per_s,
        truth.requests_per_s,
        res.run.cpu_percent if res.run else float("nan"),
        res.lag_p99_ms,
        float(srv.stats.get("late_p99_ms", 0.0)),
        res.note[:80] if not res.ok else "",
        res.grade.paired.get("ttft_p99") if res.grade and res.grade.paired else None,
        k,
    )


def _until_saturated(steps: Iterator[CapacityRow]) -> list[CapacityRow]:
    """Run the steps (lazily) until loadgen is clearly saturated: lag p99 past 4× the bound twice (single lag spikes
    make p99 of a short run noisy, so one miss does not end a sweep)."""
    rows, over = [], 0
    for row in steps:
        rows.append(row)
        if row.lag_p99 is None or row.lag_p99 >= 4 * LAG_BOUND_MS:
            over += 1
            if over >= 2:
                break
    return rows


def sweep_chunks(
    seconds: float,
    cores: Cores,
    workdir: Path,
    streams: int = 256,
    itls: tuple[float, ...] = (6.0, 4.0, 3.0, 2.0, 1.5, 1.25, 1.0),
    k: int = 1,
) -> list[CapacityRow]:
    """loadgen at rising offered chunk rates (256-token outputs, k tokens a chunk: the ITL is per token, so a chunk
    comes every k × ITL), until it is clearly saturated."""
    return _until_saturated(
        measure("loadgen", "chunks", streams, itl / k, 256, seconds, cores, workdir, k=k) for itl in itls
    )


def sweep_requests(
    seconds: float,
    cores: Cores,
    workdir: Path,
    streams: tuple[int, ...] = (16, 32, 64, 96, 128, 192),
    k: int = 1,
) -> list[CapacityRow]:
    """loadgen with 16-token outputs (1 ms per chunk) and more and more streams: streaming requests per second."""
    return _until_saturated(
        measure("loadgen", "requests", n, 1.0 / k, 16, seconds, cores, workdir, k=k) for n in streams
    )


def best(rows: list[CapacityRow], attr: str) -> CapacityRow | None:
    ok = [r for r in rows if r.lag_p99 is not None and r.lag_p99 < LAG_BOUND_MS]
    return max(ok, key=lambda r: getattr(r, attr)) if ok else None


HEADER = [
    "what",
    "client",
    "streams",
    "ITL ms",
    "out tok",
    "offered chunks/s",
    "chunks/s",
    "req/s",
    "CPU %",
    "lag p99 ms",
    "server late p99",
    "note",
]


def table(rows: list[CapacityRow], title: str) -> str:
    out = [
        [
            r.label,
            r.client,
            str(r.streams),
            f"{r.itl_ms:g}",
            str(r.output_tokens),
            f"{r.offered_chunks_s:,.0f}",
            f"{r.chunks_s:,.0f}",
            f"{r.requests_s:,.0f}",
            fmt(r.cpu, 0),
            fmt(r.lag_p99, 1) if r.lag_p99 is not None else "—",
            fmt(r.server_late_p99, 1),
            r.note,
        ]
        for r in rows
    ]
    return print_table(title, HEADER, out)
