"""Fidelity: what each client adds to TTFT and gets wrong in per-token ITL, against the server's truth log."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bench.common import Cores, bench_server, fmt, print_table
from bench.grading import Truth
from bench.runners import CLIENTS, Job, Result


@dataclass
class FidelityRow:
    streams: int
    k: int
    result: Result
    truth: dict[str, float]
    server_late_p99_ms: float
    chunks_per_s: float


def run_one(
    client: str,
    streams: int,
    k: int,
    seconds: float,
    cores: Cores,
    workdir: Path,
    *,
    itl_ms: float = 10.0,
    output_tokens: int = 64,
    workers: int = 0,
) -> FidelityRow:
    wd = workdir / (f"fid-{client}-{streams}-k{k}" + (f"-w{workers}" if workers else ""))
    wd.mkdir(parents=True, exist_ok=True)
    with bench_server(wd, cores, itl_ms=itl_ms, k=k, output_tokens=output_tokens, force_output=True) as srv:
        job = Job(srv.base_url, streams, output_tokens, seconds, wd, cores, workers=workers, itl_ms=itl_ms)
        res = CLIENTS[client](job)
    truth = Truth.load(srv.truth) if srv.truth.exists() else None
    res.graded(truth)
    return FidelityRow(
        streams,
        k,
        res,
        truth.pcts() if truth else {},
        float(srv.stats.get("late_p99_ms", 0.0)),
        truth.chunks_per_s if truth else 0.0,
    )


HEADER = [
    "streams",
    "k",
    "client",
    "reqs",
    "TTFT p50/p99 (truth)",
    "added TTFT p50 / p99",
    "ITL p50 / p99 (truth)",
    "ITL err p50 / p99",
    "paired TTFT p50/p99",
    "paired |ITL err| p99",
    "CPU %",
    "lag p99",
    "vs loadgen",
]


def _pair(rep: dict[str, float], truth: dict[str, float], metric: str, digits: int) -> str:
    """'tool p50/p99 (truth p50/p99)'."""
    tool = f"{fmt(rep.get(f'{metric}_p50'), digits)}/{fmt(rep.get(f'{metric}_p99'), digits)}"
    return f"{tool} ({fmt(truth.get(f'{metric}_p50'), digits)}/{fmt(truth.get(f'{metric}_p99'), digits)})"


def table(rows: list[FidelityRow]) -> str:
    out = []
    base: dict[tuple[int, int], float] = {}
    for r in rows:
        if r.result.client == "loadgen" and r.result.grade is not None:
            base[(r.streams, r.k)] = abs(r.result.grade.added(r.truth)["ttft_p99"])
    for r in rows:
        res, t = r.result, r.truth
        if not res.ok or res.grade is None:
            out.append(
                [str(r.streams), str(r.k), res.client, "—", "—", "—", "—", "—", "—", "—", "—", "—", res.note[:90]]
            )
            continue
        g = res.grade
        a = g.added(t)
        rep = g.reported
        p = g.paired
        ratio = "—"
        b = base.get((r.streams, r.k))
        if b is not None and res.client != "loadgen":
            ratio = f"TTFT+ p99 {max(abs(a['ttft_p99']), 0.05) / max(b, 0.05):.0f}×"
        out.append(
            [
                str(r.streams),
                str(r.k),
                res.client,
                str(g.requests),
                _pair(rep, t, "ttft", 1),
                f"{fmt(a['ttft_p50'], 2)} / {fmt(a['ttft_p99'], 2)}",
                _pair(rep, t, "itl", 2),
                f"{fmt(a['itl_p50'], 2)} / {fmt(a['itl_p99'], 2)}",
                f"{fmt(p.get('ttft_p50'), 2)}/{fmt(p.get('ttft_p99'), 2)}" if p else "—",
                fmt(p.get("itl_abs_p99"), 2) if p else "—",
                fmt(res.run.cpu_percent, 0) if res.run else "—",
                fmt(res.lag_p99_ms, 1) if res.lag_p99_ms is not None else "—",
                ratio,
            ]
        )
    return print_table("Fidelity (ms; 10 ms/token, TTFT 20 ms; added = tool's percentile − truth's)", HEADER, out)
