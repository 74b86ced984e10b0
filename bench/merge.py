"""The master's merge at 10 / 100 / 1,000 workers × 50 groups (10 variants × 5 mixes): ms per report interval, RSS,
and the final merge.

`python -m bench.merge [--workers 10,100,1000] [--rounds 9] [--profile W] [--name merge]`
(`LOADGEN_PURE_PYTHON=1 python -m bench.merge --name merge-python`: the same without the C merge.)

Each worker serves 100 req/s spread over the 50 (variant, mix) groups: 300 requests per 3-s interval. It reports
every interval (health: its loop lag, CPU, reads), and ships its aggregate (histograms with their counters) every
`hist_every(W, 50)`-th report, staggered by worker index as `Runtime.report_since_last` does (`locust_plugin.plugin
.hist_every`): about `_HIST_SETS_PER_INTERVAL / 50` workers ship one per interval, each holding the `hist_every`
intervals of requests it accumulated. The master unpacks every message (msgpack, as Locust's protocol carries it) and
merges it into its `Collector`; both are timed, per interval, over `rounds` intervals after a first one (which also
meets each worker for the first time). Every W runs in a fresh interpreter, its messages built by another: RSS is the
master's own (its high-water mark, `ru_maxrss`, which includes the imports and this bench's store of the messages it
replays); `rss_merge_mb` is what the merging added to it.

The final merge: every worker's final delta, 1,000 of them, each with requests of every group (as bench/render.py:
8 requests a group), merged into one `Aggregate` as the report does; and the same with full deltas (`final_full`:
each worker's final holding `hist_every` intervals of requests, the interval part's shipped aggregates — the most a
final holds when workers ship every few reports; half that on average). Each final figure is the median of three
fresh processes (`final_merge_s_sittings` keeps all three): one call of about a second moves by ±15 % minute to
minute on this VM. Writes bench/results/merge.json.
"""

from __future__ import annotations

import argparse
import gc
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgpack
import orjson

_VARIANTS = 10
_MIXES = 5
_REQ_PER_INTERVAL = 300  # a worker at 100 req/s, Locust's 3 s report interval
_SMALL = 20  # distinct small aggregates (render.py's: 8 requests a group) the deltas are built from
_FULL = 6  # distinct full deltas per worker count
_FINAL_SITTINGS = 3  # fresh processes per final merge figure (its median kept)


def _small_aggregates() -> list[Any]:
    from bench.render import _delta
    from loadgen.measure.aggregate import Aggregate

    rng = random.Random(7)
    out = []
    for d in range(_SMALL):
        agg = Aggregate()
        agg.merge_wire(_delta(rng, _VARIANTS, _MIXES, 1000.0 + d))
        out.append(agg)
    return out


def _health(rng: random.Random) -> dict[str, Any]:
    from loadgen.measure.health import HealthStats

    health = HealthStats()
    for _ in range(300):  # 100 loop-lag samples a second
        health.add_lag(rng.expovariate(1000))
    for _ in range(3):
        health.add_cpu(rng.uniform(10, 60))
    health.add_reads(20_000, rng.randint(0, 20), rng.uniform(0.0, 0.004))
    return health.to_wire()


def _message(w: int, health: dict[str, Any], agg: dict[str, Any] | None) -> bytes:
    data: dict[str, Any] = {"run": 0, "health": health, "window": [100.0, None], "in_flight": 12, "tasks_running": []}
    if agg is not None:
        data["agg"] = agg
    return msgpack.dumps(("stats", {"loadgen": data}, f"worker-{w}"))


def generate(counts: list[int], out: Path) -> None:
    """Build the messages of every worker count into folder `out` (msgpack): lean (health only) and full (with the
    aggregate of `hist_every` intervals), one file per worker count, and the final deltas."""
    from bench.render import _delta
    from loadgen.locust_plugin.plugin import hist_every
    from loadgen.measure.aggregate import Aggregate

    rng = random.Random(11)
    small = _small_aggregates()
    lean = [_message(0, _health(rng), None) for _ in range(40)]
    for w in counts:
        every = hist_every(w, _VARIANTS * _MIXES)
        # A full delta: the requests of `every` intervals, as a sum of small aggregates (the same distributions).
        parts = max(1, round(every * _REQ_PER_INTERVAL / (8 * _VARIANTS * _MIXES)))
        full = []
        for _ in range(_FULL):
            agg = Aggregate()
            for _ in range(parts):
                agg.merge(rng.choice(small))
            full.append(_message(0, _health(rng), agg.pop_delta()))
        doc = {"every": every, "requests_per_delta": parts * 8 * _VARIANTS * _MIXES, "full": full, "lean": lean}
        (out / f"interval-{w}.msgpack").write_bytes(msgpack.dumps(doc))
    r2 = random.Random(7)
    final = [msgpack.dumps(_delta(r2, _VARIANTS, _MIXES, 1000.0 + d)) for d in range(_SMALL)]
    (out / "final.msgpack").write_bytes(msgpack.dumps(final))


def _ru_maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _import_as_a_master() -> None:
    """What a master holds besides Locust before it merges (the scenario's model, the report builder): `import
    loadgen` no longer imports them by itself, and the RSS figures count them, as they always did."""
    import loadgen.config
    import loadgen.report.build  # noqa: F401


def measure(w: int, path: Path, rounds: int, profile: bool) -> dict[str, Any]:
    """One worker count, in this (fresh) process: the intervals' unpack and merge ms, the master's RSS."""
    from loadgen.measure.collector import Collector

    _import_as_a_master()

    rss_imports = _ru_maxrss_mb()
    spec = msgpack.loads((path / f"interval-{w}.msgpack").read_bytes(), raw=False)
    lean, full, every = spec["lean"], spec["full"], spec["every"]
    gc.collect()
    rss_start = _ru_maxrss_mb()
    col = Collector()

    def interval(k: int) -> tuple[float, float, int]:
        # Runtime.report_since_last: worker i ships its aggregate when (its report number + i) % every == 0.
        batch = [full[i % len(full)] if (k + i) % every == 0 else lean[i % len(lean)] for i in range(w)]
        unpack = merge = 0.0
        # One message at a time, as Locust hands them over: unpacked, then merged.
        for i, m in enumerate(batch):
            t0 = time.perf_counter()
            _, data, _ = msgpack.loads(m, raw=False, strict_map_key=False)
            t1 = time.perf_counter()
            col.merge_report(f"worker-{i}", data["loadgen"])
            t2 = time.perf_counter()
            unpack += t1 - t0
            merge += t2 - t1
        return unpack * 1e3, merge * 1e3, sum((k + i) % every == 0 for i in range(w))

    interval(0)  # the first interval meets every worker
    unpack, merge, shipped = [], [], []
    prof: Any = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    for k in range(1, rounds + 1):
        gc.collect()
        u, m, s = interval(k)
        unpack.append(u)
        merge.append(m)
        shipped.append(s)
    if prof is not None:
        import pstats

        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(35)
    total = [u + m for u, m in zip(unpack, merge, strict=True)]
    return {
        "workers": w,
        "groups": _VARIANTS * _MIXES,
        "hist_every": every,
        "aggregates_per_interval": statistics.median(shipped),
        "requests_per_aggregate": spec["requests_per_delta"],
        "rounds": rounds,
        "unpack_ms": round(statistics.median(unpack), 2),
        "merge_ms": round(statistics.median(merge), 2),
        "ms_per_interval": round(statistics.median(total), 2),
        "ms_per_interval_max": round(max(total), 2),
        "rss_imports_mb": round(rss_imports, 1),
        "rss_before_mb": round(rss_start, 1),
        "rss_peak_mb": round(_ru_maxrss_mb(), 1),
        # What the merging added to the high-water mark: the collector's state and one message decoded at a time
        # (bounded by groups × buckets, not by workers), apart from the imports and this bench's store of messages.
        "rss_merge_mb": round(_ru_maxrss_mb() - rss_start, 1),
    }


def measure_final(w: int, path: Path, profile: bool, full: bool = False) -> dict[str, Any]:
    """Every worker's final delta (`w` of them) merged into one Aggregate, as the report does: small deltas (8
    requests a group), or (`full`) the interval part's shipped aggregates, each holding `hist_every` intervals of
    requests — what a worker's final holds at most when it ships every `hist_every`-th report (half that on
    average)."""
    from loadgen.measure.aggregate import Aggregate

    _import_as_a_master()
    rss_imports = _ru_maxrss_mb()
    if full:
        spec = msgpack.loads((path / f"interval-{w}.msgpack").read_bytes(), raw=False)
        finals = [
            msgpack.dumps(msgpack.loads(m, raw=False, strict_map_key=False)[1]["loadgen"]["agg"]) for m in spec["full"]
        ]
        del spec
    else:
        finals = msgpack.loads((path / "final.msgpack").read_bytes(), raw=False)
    gc.collect()
    rss_start = _ru_maxrss_mb()
    prof: Any = None
    if profile:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()
    t0 = time.perf_counter()
    agg = Aggregate()
    for i in range(w):
        agg.merge_wire(msgpack.loads(finals[i % len(finals)], raw=False, strict_map_key=False))
    s = time.perf_counter() - t0
    if prof is not None:
        import pstats

        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("cumulative").print_stats(35)
    return {
        "workers": w,
        "groups": len(agg.groups),
        "requests": sum(g.requests for g in agg.groups.values()),
        "final_merge_s": round(s, 3),
        "rss_imports_mb": round(rss_imports, 1),
        "rss_before_mb": round(rss_start, 1),
        "rss_peak_mb": round(_ru_maxrss_mb(), 1),
    }


def _median_range(values: list[float], digits: int) -> str:
    """`median (min–max)` of a figure's sittings."""
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}–{max(values):.{digits}f})"


def _child(*args: str) -> Any:
    out = subprocess.run([sys.executable, "-m", "bench.merge", *args], check=True, capture_output=True, timeout=1800)
    return orjson.loads(out.stdout)


def main() -> None:
    from bench.common import machine_info, print_table, write_results

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="10,100,1000")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--name", default="merge", help="results file: bench/results/NAME.json")
    ap.add_argument("--profile", type=int, default=0, help="cProfile one worker count's intervals and final merge")
    ap.add_argument("--gen", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--measure", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--final", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--final-full", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    if args.gen:
        generate(counts, Path(args.gen))
        return
    if args.measure:
        w, path = args.measure.split(":", 1)
        row = measure(int(w), Path(path), args.rounds, bool(args.profile))
        sys.stdout.buffer.write(orjson.dumps(row))
        return
    if args.final or args.final_full:
        w, path = (args.final or args.final_full).split(":", 1)
        row = measure_final(int(w), Path(path), bool(args.profile), full=bool(args.final_full))
        sys.stdout.buffer.write(orjson.dumps(row))
        return
    machine = machine_info()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "bench.merge", "--workers", args.workers, "--gen", str(path)], check=True)
        print(f"(messages built in {time.perf_counter() - t0:.0f} s)", file=sys.stderr)
        if args.profile:
            w = args.profile
            cmd = [sys.executable, "-m", "bench.merge", "--rounds", str(args.rounds), "--profile", "1"]
            subprocess.run([*cmd, "--measure", f"{w}:{path}"], check=True)
            subprocess.run([*cmd, "--final", f"{w}:{path}"], check=True)
            return
        rows = [_child("--rounds", str(args.rounds), "--measure", f"{w}:{path}") for w in counts]
        # The final merge is one call of about a second at 1,000 workers, which this VM's minute-to-minute noise
        # moves by ±15 %: _FINAL_SITTINGS fresh processes each, alternating small and full deltas, their median kept.
        finals: list[list[Any]] = [[] for _ in counts]
        full: list[list[Any]] = [[] for _ in counts]
        for _ in range(_FINAL_SITTINGS):
            for k, w in enumerate(counts):
                finals[k].append(_child("--final", f"{w}:{path}"))
                full[k].append(_child("--final-full", f"{w}:{path}"))
    for r, f, ff in zip(rows, finals, full, strict=True):
        r["final_merge_s_sittings"] = [x["final_merge_s"] for x in f]
        r["final_merge_s"] = statistics.median(r["final_merge_s_sittings"])
        r["final_rss_peak_mb"] = max(x["rss_peak_mb"] for x in f)
        r["final_full_merge_s_sittings"] = [x["final_merge_s"] for x in ff]
        r["final_full_merge_s"] = statistics.median(r["final_full_merge_s_sittings"])
        r["final_full_requests"] = ff[0]["requests"]
        r["final_full_rss_peak_mb"] = max(x["rss_peak_mb"] for x in ff)
    table = [
        [
            str(r["workers"]),
            str(r["groups"]),
            f"{r['hist_every']} ({r['aggregates_per_interval']:.0f}/interval)",
            f"{r['unpack_ms']:.1f}",
            f"{r['merge_ms']:.1f}",
            f"{r['ms_per_interval']:.1f} (max {r['ms_per_interval_max']:.1f})",
            f"{r['rss_peak_mb']:.0f} (+{r['rss_merge_mb']:.0f})",
            _median_range(r["final_merge_s_sittings"], 3),
            f"{r['final_rss_peak_mb']:.0f}",
            _median_range(r["final_full_merge_s_sittings"], 2),
        ]
        for r in rows
    ]
    print_table(
        f"Master merge, {_VARIANTS} variants × {_MIXES} mixes ({machine['cpu_model']}, {machine['cores']} cores)",
        ["workers", "groups", "aggregate every", "unpack ms", "merge ms", "ms / interval", "RSS MB (merge)", "final s",
         "final RSS MB", "final, full deltas s"],
        table,
    )  # fmt: skip
    from loadgen.measure.hist_merge import native_merge_available

    doc = {
        # The C merge of wire histograms (loadgen/measure/_hist_merge.c); LOADGEN_PURE_PYTHON=1 measures without it.
        "c_merge": native_merge_available(),
        "variants": _VARIANTS,
        "mixes": _MIXES,
        "requests_per_interval_per_worker": _REQ_PER_INTERVAL,
        "final_delta_requests_per_group": 8,
        "rows": rows,
    }
    print(f"(results: {write_results(args.name, doc, machine)})")


if __name__ == "__main__":
    main()
