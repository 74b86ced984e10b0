"""loadgen's own performance against a ground-truth streaming server, side by side with peer tools.

    python bench/run.py --quick              # 32/256 streams, k = 1/4, short runs, every part
    python bench/run.py                      # 32/256/1024 streams, longer runs
    python bench/run.py --parts fidelity --clients loadgen,guidellm --streams 32 --k 4

Parts: fidelity, capacity, scale (1 vs 2 worker processes), merge (master merge cost), memory, hotpath. Server and
client are pinned to different CPUs (`--server-cpu`, `--client-cpu`). Peers run from virtualenvs under
$BENCH_VENVS (default .cache/peers; `python -m bench.peers --install` puts them there). See bench/README.md.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson  # noqa: E402

from bench import capacity, fidelity, hotpath, scale  # noqa: E402
from bench.common import Cores, busy_fraction, fmt, load_average, machine_info, print_table, write_results  # noqa: E402
from bench.runners import CLIENTS, INSTALL, installed  # noqa: E402

PARTS = ("fidelity", "capacity", "scale", "merge", "memory", "hotpath")
PEERS = ("guidellm", "inference-perf", "aiperf", "fasthttp", "httpx")
# loadgen with its C read path switched off: what loadgen/protocol/_wire.c buys, in the same run.
VARIANTS = ("loadgen-py",)
_FLOOR_MS = 0.05


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="32/256 streams, 5 s runs, 1M-request master memory")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    p.add_argument(
        "--clients", default=",".join(("loadgen", *VARIANTS, *PEERS)), help=f"comma list of {', '.join(CLIENTS)}"
    )
    p.add_argument("--streams", default="", help="fidelity scales (default 32,256,1024; --quick 32,256)")
    p.add_argument("--k", default="1,4", help="tokens per chunk for fidelity runs")
    p.add_argument("--seconds", type=float, default=0.0, help="seconds per client run (default 10; --quick 5)")
    p.add_argument("--server-cpu", default="0", help="taskset CPU list for the bench server ('' = not pinned)")
    p.add_argument("--client-cpu", default="1", help="taskset CPU list for the client under test")
    p.add_argument("--out", default="/tmp/loadgen-bench", help="work folder: logs, truth logs, results.json")
    p.add_argument("--max-load", type=float, default=0.5, help="wait (up to 2 min) until the 1-min load is below")
    return p.parse_args(argv)


def _wait_quiet(limit: float, first: list[bool] = [True]) -> None:  # noqa: B006 - remembers the first call
    """Before the first run: the 1-minute load average below `limit`. Between runs (our own last run still weighs
    in the load average for minutes): the CPUs less than `limit` / cores busy over a second."""
    deadline = time.monotonic() + 120
    cores = os.cpu_count() or 1
    while True:
        busy = load_average() if first[0] else busy_fraction() * cores
        if busy <= limit or time.monotonic() > deadline:
            break
        print(f"# machine busy ({busy:.2f} CPUs) > {limit}: waiting…", file=sys.stderr)
        time.sleep(5)
    if busy > limit:
        print(f"# WARNING: machine busy ({busy:.2f} CPUs): numbers may be noisy", file=sys.stderr)
    first[0] = False


def _progress(msg: str) -> None:
    print(f"# {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    parts = _csv(a.parts)
    clients = _csv(a.clients)
    unknown = [c for c in clients if c not in CLIENTS] + [p for p in parts if p not in PARTS]
    if unknown:
        print(f"unknown: {unknown}; clients: {list(CLIENTS)}, parts: {list(PARTS)}", file=sys.stderr)
        return 2
    streams = [int(s) for s in _csv(a.streams)] if a.streams else ([32, 256] if a.quick else [32, 256, 1024])
    ks = [int(k) for k in _csv(a.k)]
    seconds = a.seconds or (5.0 if a.quick else 10.0)
    cores = Cores(a.server_cpu, a.client_cpu)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    machine = machine_info()
    results: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "argv": sys.argv[1:] if argv is None else argv,
        "parts": parts,
        "clients": clients,
        "server_cpu": a.server_cpu,
        "client_cpu": a.client_cpu,
        "seconds": seconds,
    }
    texts: list[str] = []

    missing = [c for c in clients if not installed(c)]
    for c in missing:
        print(f"# {c}: NOT INSTALLED — skipped. Install with:\n#   {INSTALL[c]}", file=sys.stderr)
    clients = [c for c in clients if c not in missing]

    fid_rows: list[fidelity.FidelityRow] = []
    if "fidelity" in parts:
        for n in streams:
            for k in ks:
                for c in clients:
                    _wait_quiet(a.max_load)
                    _progress(f"fidelity: {c}, {n} streams, k={k}")
                    fid_rows.append(fidelity.run_one(c, n, k, seconds, cores, out))
        texts.append(fidelity.table(fid_rows))
        results["fidelity"] = [_fid_json(r) for r in fid_rows]

    cap_rows: list[capacity.CapacityRow] = []
    if "capacity" in parts:
        _progress("capacity: loadgen chunks/s sweep")
        chunk_rows = capacity.sweep_chunks(seconds, cores, out)
        _progress("capacity: loadgen requests/s sweep")
        req_rows = capacity.sweep_requests(seconds, cores, out)
        peer_rows = []
        for c in clients:
            _wait_quiet(a.max_load)
            _progress(f"capacity: {c} at 256 streams, 1 ms/token")
            peer_rows.append(capacity.measure(c, "256 streams, 1 ms ITL", 256, 1.0, 256, seconds, cores, out))
        cap_rows = chunk_rows + req_rows + peer_rows
        texts.append(capacity.table(cap_rows, f"Capacity (one client process; lag bound {capacity.LAG_BOUND_MS} ms)"))
        results["capacity"] = [r.__dict__ for r in cap_rows]

    scale_rows: list[capacity.CapacityRow] = []
    if "scale" in parts:
        for w in (1, 2):
            _wait_quiet(a.max_load)
            _progress(f"scale-out: loadgen with {w} worker process(es)")
            scale_rows.append(
                capacity.measure("loadgen", f"{w} worker(s)", 256, 2.5, 256, seconds, cores, out, workers=w, raw=True)
            )
        texts.append(
            capacity.table(scale_rows, f"Scale-out: 1 vs 2 worker processes (+ master), all on CPU {a.client_cpu}")
        )
        results["scale"] = [r.__dict__ for r in scale_rows]

    merge_rows: list[dict[str, Any]] = []
    if "merge" in parts:
        _progress("master merge cost")
        merge_rows = scale.merge_cost() + scale.merge_cost(counts=(1000,), mixes=3)
        texts.append(scale.merge_table(merge_rows))
        results["merge"] = merge_rows

    if "memory" in parts:
        _progress("memory")
        worker = scale.measure_memory_in_subprocess("worker", 50_000 if a.quick else 200_000)
        master = scale.measure_memory_in_subprocess("master", 1_000_000 if a.quick else 10_000_000)
        texts.append(scale.memory_table(worker, master))
        results["memory"] = {"worker": worker, "master": master}

    if "hotpath" in parts:
        _progress("hot path micro-benchmarks")
        rows = hotpath.run()
        texts.append(print_table("Hot path (CPU only, no network)", ["what", "value"], [list(r) for r in rows]))
        results["hotpath"] = rows

    texts.append(_summary(fid_rows, cap_rows, merge_rows, results.get("memory")))
    (out / "results.json").write_bytes(
        orjson.dumps(results, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY, default=str)
    )
    (out / "results.md").write_text("\n".join(texts) + "\n")
    kept = write_results(results_name(parts, a.quick), results, machine)
    print(f"\n(results: {out / 'results.md'}, {out / 'results.json'}; kept: {kept})")
    return 0


def results_name(parts: list[str], quick: bool) -> str:
    """bench/results/ file for these parts: `run` (every part), `run-quick`, or e.g. `run-capacity` for a subset,
    so that a partial run never overwrites a full one."""
    name = "run" if set(parts) == set(PARTS) else "run-" + "-".join(p for p in PARTS if p in parts)
    return name + "-quick" if quick else name


def _fid_json(r: fidelity.FidelityRow) -> dict[str, Any]:
    g = r.result.grade
    return {
        "client": r.result.client,
        "streams": r.streams,
        "k": r.k,
        "ok": r.result.ok,
        "note": r.result.note,
        "truth": r.truth,
        "reported": g.reported if g else {},
        "paired": g.paired if g else {},
        "added": g.added(r.truth) if g and r.truth else {},
        "requests": g.requests if g else 0,
        "cpu_percent": r.result.run.cpu_percent if r.result.run else None,
        "lag_p99_ms": r.result.lag_p99_ms,
        "server_late_p99_ms": r.server_late_p99_ms,
        "chunks_per_s": r.chunks_per_s,
    }


def _summary(
    fid: list[fidelity.FidelityRow],
    cap: list[capacity.CapacityRow],
    merge: list[dict[str, Any]],
    memory: dict[str, Any] | None,
) -> str:
    """One side-by-side table: a column per client, loadgen first, peers with their ratio to loadgen."""
    names: list[str] = ["loadgen"]
    for r in fid:
        if r.result.client not in names:
            names.append(r.result.client)
    for r in cap:
        if r.label.startswith("256 streams") and r.client not in names:
            names.append(r.client)
    rows: list[list[str]] = []

    def add(label: str, values: dict[str, float], lower_is_better: bool = True, digits: int = 1) -> None:
        base = values.get("loadgen")
        row = [label]
        for n in names:
            v = values.get(n)
            if v is None or (isinstance(v, float) and math.isnan(v)):
                row.append("—")
                continue
            cell = fmt(v, digits)
            if n != "loadgen" and base is not None and not math.isnan(base):
                if lower_is_better:
                    # Below 0.05 ms both are at the resolution of this machine's clocks and of a 0.1 % histogram
                    # (0.01 ms at 10 ms): ratios of such numbers would be noise.
                    cell += f" ({max(abs(v), _FLOOR_MS) / max(abs(base), _FLOOR_MS):.1f}×)"
                elif not lower_is_better and base > 0:
                    cell += f" ({v / base:.2f}×)"
            row.append(cell)
        rows.append(row)

    for r_streams, r_k in sorted({(r.streams, r.k) for r in fid}):
        sel = [r for r in fid if (r.streams, r.k) == (r_streams, r_k) and r.result.ok and r.result.grade]
        added = {r.result.client: r.result.grade.added(r.truth) for r in sel}  # type: ignore[union-attr]
        add(f"added TTFT p50 ms, {r_streams} streams, k={r_k}", {c: a["ttft_p50"] for c, a in added.items()})
        add(f"added TTFT p99 ms, {r_streams} streams, k={r_k}", {c: a["ttft_p99"] for c, a in added.items()})
        add(f"ITL p50 error ms, {r_streams} streams, k={r_k}", {c: a["itl_p50"] for c, a in added.items()}, digits=2)
        add(f"ITL p99 error ms, {r_streams} streams, k={r_k}", {c: a["itl_p99"] for c, a in added.items()}, digits=2)
        paired = {
            r.result.client: r.result.grade.paired.get("itl_abs_p99", math.nan)
            for r in sel  # type: ignore[union-attr]
            if r.result.grade.paired
        }  # type: ignore[union-attr]
        if paired:
            add(f"paired |ITL err| p99 ms, {r_streams} streams, k={r_k}", paired, digits=2)
    peer_cap = [r for r in cap if r.label.startswith("256 streams")]
    if peer_cap:
        add(
            "chunks/s at 256 streams, 1 ms/token",
            {r.client: r.chunks_s for r in peer_cap},
            lower_is_better=False,
            digits=0,
        )
        add("client CPU % at that load", {r.client: r.cpu for r in peer_cap}, digits=0)
    best_chunks = capacity.best([r for r in cap if r.label == "chunks"], "chunks_s")
    best_reqs = capacity.best([r for r in cap if r.label == "requests"], "requests_s")
    if best_chunks:
        add(
            f"loadgen max chunks/s, lag p99 < {capacity.LAG_BOUND_MS:g} ms", {"loadgen": best_chunks.chunks_s}, digits=0
        )
    if best_reqs:
        add(
            f"loadgen max req/s (16 tokens), lag p99 < {capacity.LAG_BOUND_MS:g} ms",
            {"loadgen": best_reqs.requests_s},
            digits=0,
        )
    for m in merge:
        add(
            f"master merge per interval ms, {m['workers']} workers × {m['mixes']} mix(es)",
            {"loadgen": m["unpack_ms"] + m["merge_ms"]},
        )
    if memory:
        w, mm = memory["worker"], memory["master"]
        add(f"worker RSS growth MB, {w[0][0]:,}→{w[-1][0]:,} requests", {"loadgen": w[-1][1] - w[0][1]})
        add(f"master RSS growth MB, 0→{mm[-1][0]:,} requests", {"loadgen": mm[-1][1] - mm[0][1]})
    return print_table(
        "Summary: loadgen vs peers (peer / loadgen in parentheses; ms unless noted)", ["metric", *names], rows
    )


if __name__ == "__main__":
    sys.exit(main())
