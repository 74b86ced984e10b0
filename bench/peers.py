"""loadgen and its peers (GuideLLM, inference-perf, NVIDIA AIPerf) on the same workloads against the same ground truth.

    python -m bench.peers                          # install the peers if needed, run every part, keep the figures
    python -m bench.peers --install                # only install (pinned, idempotent: bench/peer_install.py)
    python -m bench.peers --tools loadgen,aiperf --parts fidelity --seconds 5

Every tool sends /v1/completions to the bench server (bench/server.py: 20 ms to the first token, 10 ms per token,
64 tokens, k tokens a chunk), pinned to its own core (the server to another), and is graded from its own output files
(bench/peer_outputs.py) against the server's truth log, request by request (bench/peer_grade.py):

- fidelity: closed loop, 32 streams, k = 1 and 4; with the server's token counts per chunk and without, where the tool
  has that option (GuideLLM always asks for them).
- capacity: the same from 32 streams up to 128, 256, 512 while the tool's added TTFT p99 stays within
  ACCURATE_TTFT_P99_MS, or down to 8 and 2 until it does: its requests and chunks per second on its one core at the
  highest step that stays accurate.
- arrivals: open loop at a fixed rate (each tool's constant-rate mode): the arrival sequence the server saw.
- loadgen-capacity: loadgen's own ceiling on one core at k = 1 and 4 (bench/capacity.py's sweeps, loop lag bound).

Writes bench/results/peers.json (machine, each tool's version and exact command, the load average at the start and
end of each part); docs/comparison.md is generated from it (`python scripts/gen-docs.py`).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench import capacity
from bench.common import RESULTS, Cores, bench_server, busy_fraction, fmt, machine_info, print_table, write_results
from bench.peer_grade import TruthIndex, arrival_parity, grade
from bench.peer_install import PEERS, ensure, version
from bench.peer_outputs import READERS, read_loadgen
from bench.runners import CLIENTS, Job, Result

TOOLS = ("loadgen", "guidellm", "inference-perf", "aiperf")
PARTS = ("fidelity", "capacity", "arrivals", "loadgen-capacity")
STREAMS = 32
# From the fidelity step's 32 streams, a tool climbs while its added TTFT stays within the bound, or descends until it
# does: the highest accurate step is its throughput on one core.
UP, DOWN = (128, 256, 512), (8, 2)
# loadgen's own ceiling: bench/capacity.py's sweeps, from loads well under it.
CHUNK_ITLS_MS = (24.0, 16.0, 12.0, 8.0, 6.0, 4.0, 3.0, 2.0, 1.5, 1.0)
REQUEST_STREAMS = (4, 8, 16, 32, 64, 96, 128)
ITL_MS, TTFT_MS, OUTPUT_TOKENS = 10.0, 20.0, 64
RATE = 50.0  # requests/s for the open-loop arrival check
ACCURATE_TTFT_P99_MS = 5.0
NOT_QUIET = (
    "other work shared the CPUs: a load average of 1 or more before the first part, or 1 CPU or more busy with other "
    "work before a part"
)
# Tools with an option to count tokens from the server's usage instead of the text (and what it is).
USAGE_OPTION = {
    "loadgen": "continuous_usage_stats: true (variant)",
    "aiperf": "--use-server-token-count (its --per-chunk-usage is for chat only)",
    "inference-perf": "report.request_lifecycle.use_server_output_tokens: true",
    "guidellm": None,  # always asks for usage in every chunk (stream_options.continuous_usage_stats)
}
ITL_DEFINITION = {
    "loadgen": "per token: a chunk of k tokens after a gap g gives k samples of g/k",
    "aiperf": "per request: (latency − TTFT) / (output tokens − tokens of the first chunk); its summary over requests",
    "inference-perf": "per token: each token takes its chunk's arrival time (the chunk's other tokens get 0)",
    "guidellm": "per request: (last token − first token) / (output tokens − 1), weighted by tokens in its summary",
}


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def _progress(msg: str) -> None:
    print(f"# {time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def _config_text(res: Result) -> str | None:
    """The config file the command names (loadgen's scenario, GuideLLM's scenario, inference-perf's config)."""
    for arg in res.cmd:
        if arg.endswith((".yaml", ".yml", ".json")) and Path(arg).is_file():
            return Path(arg).read_text()
    return None


def _read(tool: str, res: Result) -> tuple[list[Any], Any]:
    if tool == "loadgen":
        assert res.outputs is not None
        return read_loadgen(res.outputs.parent / "raw", res.outputs / "report.json")
    assert res.outputs is not None
    return READERS[tool](res.outputs)


def run_one(
    tool: str, part: str, k: int, usage: bool, cores: Cores, work: Path, seconds: float, *, streams: int, rate: float
) -> dict[str, Any]:
    tag = f"{part}-{tool}-k{k}-{'usage' if usage else 'text'}-{f'r{rate:g}' if rate else f's{streams}'}"
    wd = work / tag
    shutil.rmtree(wd, ignore_errors=True)  # a previous run's files (loadgen's raw shards) would be read as this one's
    wd.mkdir(parents=True)
    samples: list[tuple[float, float]] = []
    row: dict[str, Any] = {"part": part, "tool": tool, "k": k, "usage": usage, "streams": streams, "rate": rate}
    _progress(tag)
    with bench_server(wd, cores, itl_ms=ITL_MS, k=k, ttft_ms=TTFT_MS, output_tokens=OUTPUT_TOKENS) as srv:
        job = Job(srv.base_url, streams, OUTPUT_TOKENS, seconds, wd, cores, itl_ms=ITL_MS, ttft_ms=TTFT_MS)
        job.completions, job.usage, job.rate, job.per_request, job.samples = True, usage, rate, True, samples
        res = CLIENTS[tool](job)
    row |= {
        "cmd": res.cmd,
        "config": _config_text(res),
        "exit": res.run.returncode if res.run else None,
        "wall_s": round(res.run.wall_s, 2) if res.run else None,
        "cpu_s_total": round(res.run.cpu_s, 2) if res.run else None,
        "server_late_p99_ms": round(float(srv.stats.get("late_p99_ms", 0.0)), 3),
    }
    if not res.ok or res.outputs is None or not srv.truth.exists():
        row |= {"ok": False, "note": res.note[-400:] or "no output"}
        return row
    try:
        records, summary = _read(tool, res)
    except (OSError, ValueError, KeyError) as e:
        row |= {"ok": False, "note": f"output not read: {e!r}"[:400]}
        return row
    index = TruthIndex.load(srv.truth)
    row |= {"ok": True, **grade(records, summary, index, samples)}
    if rate:
        row["arrivals"] = arrival_parity(index, rate)
    return row


def _accurate(row: dict[str, Any]) -> bool:
    p99 = row.get("added_ttft_p99")
    return bool(row.get("ok")) and p99 is not None and p99 <= ACCURATE_TTFT_P99_MS


def capacity_summary(runs: list[dict[str, Any]], tools: list[str]) -> dict[str, Any]:
    """Per tool and k: the highest closed-loop step that stayed accurate, and the first that did not."""
    out: dict[str, Any] = {}
    for tool in tools:
        for k in (1, 4):
            steps = sorted(
                (r for r in runs if r["tool"] == tool and r["k"] == k and r["usage"] and r["part"] != "arrivals"),
                key=lambda r: r["streams"],
            )
            good = [r for r in steps if _accurate(r)]
            top = max((r["streams"] for r in good), default=0)
            bad = next((r for r in steps if not _accurate(r) and r["streams"] > top), None)

            def point(r: dict[str, Any] | None) -> dict[str, Any] | None:
                if r is None:
                    return None
                thr, cpu = r.get("throughput") or {}, r.get("cpu") or {}
                return {
                    "streams": r["streams"],
                    "requests_per_s": thr.get("requests_per_s"),
                    "chunks_per_s": thr.get("chunks_per_s"),
                    "cpu_percent": cpu.get("cpu_percent"),
                    "added_ttft_p99": r.get("added_ttft_p99"),
                }

            out.setdefault(tool, {})[f"k{k}"] = {
                "accurate_up_to": point(max(good, key=lambda r: r["streams"]) if good else None),
                "first_inaccurate": point(bad),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--install", nargs="*", metavar="PEER", help="only install these peers (default: all) and exit")
    p.add_argument("--tools", default=",".join(TOOLS), help=f"comma list of {', '.join(TOOLS)}")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    p.add_argument("--seconds", type=float, default=8.0, help="seconds per run")
    p.add_argument("--server-cpu", default="0")
    p.add_argument("--client-cpu", default="1")
    p.add_argument("--out", default="/tmp/loadgen-bench-peers", help="work folder: every run's files")
    p.add_argument("--keep", default="peers", help="bench/results/NAME.json to write ('' = none)")
    p.add_argument(
        "--update",
        action="store_true",
        help="replace only the parts run now in the kept file (a part another job disturbed), keeping the others",
    )
    a = p.parse_args(argv)
    if a.install is not None:
        for name in a.install or PEERS:
            print(name, ensure(name), version(name))
        return 0
    tools = [t.strip() for t in a.tools.split(",") if t.strip()]
    parts = [x.strip() for x in a.parts.split(",") if x.strip()]
    unknown = [t for t in tools if t not in TOOLS] + [x for x in parts if x not in PARTS]
    if unknown:
        print(f"unknown: {unknown}; tools: {TOOLS}, parts: {PARTS}", file=sys.stderr)
        return 2
    for t in tools:
        if t in PEERS:
            ensure(t)
    cores, work = Cores(a.server_cpu, a.client_cpu), Path(a.out)
    machine = machine_info()
    results: dict[str, Any] = {
        "argv": sys.argv[1:] if argv is None else argv,
        "conditions": {
            "endpoint": "/v1/completions, streamed",
            "ttft_ms": TTFT_MS,
            "itl_ms": ITL_MS,
            "output_tokens": OUTPUT_TOKENS,
            "prompt_tokens": 32,
            "streams": STREAMS,
            "ladder_up": list(UP),
            "ladder_down": list(DOWN),
            "rate": RATE,
            "seconds": a.seconds,
            "server_cpu": a.server_cpu,
            "client_cpu": a.client_cpu,
            "accurate_ttft_p99_ms": ACCURATE_TTFT_P99_MS,
        },
        "tools": {
            t: {
                "version": importlib.metadata.version("llm-loadgen") if t == "loadgen" else version(t),
                "usage_option": USAGE_OPTION[t],
                "itl_definition": ITL_DEFINITION[t],
            }
            for t in tools
        },
        "load_average": {},
        "runs": [],
    }
    runs: list[dict[str, Any]] = results["runs"]

    def part(name: str) -> bool:
        if name in parts:
            # Between parts none of our processes run, but the load average still weighs our last part for
            # minutes: the CPUs busy over a second now are other people's.
            others = round(busy_fraction() * (os.cpu_count() or 1), 2)
            results["load_average"][name] = {"start": _load(), "others_busy_cpus_at_start": others}
            return True
        return False

    def done(name: str) -> None:
        results["load_average"][name]["end"] = _load()

    if part("fidelity"):
        for k in (1, 4):
            for usage in (True, False):
                for t in tools:
                    if usage or USAGE_OPTION[t]:
                        runs.append(run_one(t, "fidelity", k, usage, cores, work, a.seconds, streams=STREAMS, rate=0))
        done("fidelity")
    if part("capacity"):
        for k in (1, 4):
            first = {r["tool"]: _accurate(r) for r in runs if r["part"] == "fidelity" and r["k"] == k and r["usage"]}
            climbing = {t for t in tools if first.get(t)}
            descending = {t for t in tools if t in first and not first[t]}
            for n in UP:
                for t in sorted(climbing):
                    row = run_one(t, "capacity", k, True, cores, work, a.seconds, streams=n, rate=0)
                    runs.append(row)
                    if not _accurate(row):
                        climbing.discard(t)  # past its accurate point: higher steps would only cost time
            for n in DOWN:
                for t in sorted(descending):
                    row = run_one(t, "capacity", k, True, cores, work, a.seconds, streams=n, rate=0)
                    runs.append(row)
                    if _accurate(row):
                        descending.discard(t)
        done("capacity")
        results["capacity"] = capacity_summary(runs, tools)
    if part("arrivals"):
        for t in tools:
            runs.append(run_one(t, "arrivals", 1, True, cores, work, a.seconds, streams=STREAMS, rate=RATE))
        done("arrivals")
    if part("loadgen-capacity"):
        rows: list[capacity.CapacityRow] = []
        for k in (1, 4):
            _progress(f"loadgen capacity, k={k}")
            rows += capacity.sweep_chunks(a.seconds, cores, work / f"lg-cap-k{k}", itls=CHUNK_ITLS_MS, k=k)
            rows += capacity.sweep_requests(a.seconds, cores, work / f"lg-cap-k{k}", streams=REQUEST_STREAMS, k=k)
        done("loadgen-capacity")
        best = {}
        for k in (1, 4):
            ck = capacity.best([r for r in rows if r.label == "chunks" and r.k == k], "chunks_s")
            rk = capacity.best([r for r in rows if r.label == "requests" and r.k == k], "requests_s")
            best[f"k{k}"] = {"chunks": ck.__dict__ if ck else None, "requests": rk.__dict__ if rk else None}
        results["loadgen_capacity"] = {
            "lag_bound_ms": capacity.LAG_BOUND_MS,
            "best": best,
            "steps": [r.__dict__ for r in rows],
        }
    starts = list(results["load_average"].values())
    # Quiet: the 1-minute load average under 1 before the first part, and under 1 CPU busy with other work before each.
    quiet = bool(starts) and starts[0]["start"][0] < 1.0 and all(v["others_busy_cpus_at_start"] < 1.0 for v in starts)
    results["quiet"] = quiet
    if not quiet:
        results["note"] = NOT_QUIET
    work.mkdir(parents=True, exist_ok=True)
    (work / "peers.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    _print_table(runs)
    if a.keep:
        if a.update and (RESULTS / f"{a.keep}.json").exists():
            old = orjson.loads((RESULTS / f"{a.keep}.json").read_bytes())
            results = _merged(old["results"], results, parts, old["machine"].get("commit"), machine.get("commit"))
        print(f"kept: {write_results(a.keep, results, machine)}")
    return 0


def _merged(
    old: dict[str, Any], new: dict[str, Any], parts: list[str], old_commit: str | None, new_commit: str | None
) -> dict[str, Any]:
    """The kept results with the parts just run replaced (runs, load averages, summaries), the others as they were;
    `parts_measured` says when and at which commit each part was."""
    out = dict(old)
    out["runs"] = [r for r in old["runs"] if r["part"] not in parts] + new["runs"]
    out["load_average"] = {**old["load_average"], **new["load_average"]}
    before = old.get("parts_measured") or {p: {"commit": old_commit} for p in old["load_average"]}
    now = {p: {"commit": new_commit, "at": time.strftime("%Y-%m-%dT%H:%M:%S%z")} for p in parts}
    out["parts_measured"] = {**before, **now}
    for key, part in (("capacity", "capacity"), ("loadgen_capacity", "loadgen-capacity")):
        if part in parts and key in new:
            out[key] = new[key]
    starts = list(out["load_average"].values())
    out["quiet"] = starts[0]["start"][0] < 1.0 and all(v["others_busy_cpus_at_start"] < 1.0 for v in starts)
    out.pop("note", None)
    if not out["quiet"]:
        out["note"] = NOT_QUIET
    return out


def _print_table(runs: list[dict[str, Any]]) -> None:
    header = ["part", "tool", "k", "usage", "streams/rate", "matched", "+TTFT p50/p99", "ITL rep−truth p50/p99"]
    header += ["chunk err p99", "CPU ms/req", "note"]
    rows = []
    for r in runs:
        rmt = r.get("reported_minus_truth") or {}
        rows.append(
            [
                r["part"],
                r["tool"],
                str(r["k"]),
                "yes" if r["usage"] else "no",
                f"{r['rate']:g}/s" if r["rate"] else str(r["streams"]),
                str((r.get("requests") or {}).get("matched", "—")),
                f"{fmt(r.get('added_ttft_p50'), 2)} / {fmt(r.get('added_ttft_p99'), 2)}",
                f"{fmt(rmt.get('itl_p50'), 2)} / {fmt(rmt.get('itl_p99'), 2)}",
                fmt(r.get("chunk_gap_abs_err_per_token_p99"), 2),
                fmt((r.get("cpu") or {}).get("ms_per_request"), 2),
                (r.get("note") or "")[:60],
            ]
        )
    print_table("Peers against the truth (ms)", header, rows)


if __name__ == "__main__":
    sys.exit(main())
