"""The worker's CPU: µs per request, and chunks per CPU-second against a minimal C client.

`python -m bench.cpu [--seconds 8] [--sittings 1] [--parts request,chunks] [--openloop]`

- **request** rows: one loadgen worker process (`loadgen run --workers 1`, the worker alone on the client core, the
  bench server and loadgen's master on the other), 32-token prompts, replies of 1 and 64 tokens (`bench/server.py`,
  TTFT 5 ms, 1 ms per token, one token per chunk), closed loop (users sized for about `--rate` requests/s at the
  server's pace, no think time) and open loop (Poisson at `--rate`). CPU µs per request = the worker's CPU time
  (every thread's, from `/proc/PID/task/*/schedstat`) over a steady-state window / the requests the server finished
  in that window (its truth log); requests/s is the same count over the window's length; `trust` is report.json's
  `run.trustworthy`. Each closed-loop row is measured for `bench/clients/minimal_client.c` too (as many streams as
  loadgen has users, the same server and window; it has no open loop): the floor one core pays for the same
  requests through the same kernel, which a per-request target is read against.
- **chunks** rows: chunks per CPU-second of the client process, loadgen's worker beside `bench/clients/minimal_client.c`
  (built here with `cc -O2`, cached under `.cache/bench/`), same server, same streams, closed loop, 256-token replies
  at a small time per token (k = 1 and 4 tokens per chunk): token chunks the server wrote in the window / the client's
  CPU seconds in it. The C client counts, parses nothing but the framing and `usage.completion_tokens`, and records
  nothing: the ceiling of one core. `loadgen/C` is the ratio. The server's `late p99` says whether it kept up (when
  it is late, chunks leave coalesced and both clients read more per `recv()`); `cpu %` is the client's share of its
  core over the window.
- `--openloop` also runs `bench.openloop --rates 1000,2500,5000,10000` (open-loop send lag and trust per process;
  it keeps its own `bench/results/openloop.json`).

Writes bench/results/cpu.json. This VM's speed swings between sittings: `--sittings N` runs every row N times in turn
and keeps each figure's range.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from bench.common import REPO, Cores, ServerRun, bench_server, fmt, machine_info, print_table, write_results
from bench.openloop import pin_worker
from bench.sittings import _commit, _worktree

C_SOURCE = REPO / "bench" / "clients" / "minimal_client.c"
C_CACHE = REPO / ".cache" / "bench"
# The loadgen measured: this checkout, or (`--commit`) a temporary worktree of a commit with its C half built.
CODE = REPO
SETTLE_S = 2.0  # after the first arrival: users spawned, connections open, caches warm
TAIL_S = 0.5  # before the last chunk: the run winding down


def build_minimal_client() -> Path:
    """Compile bench/clients/minimal_client.c once per source version (`cc -O2`, no host-specific flags)."""
    src = C_SOURCE.read_bytes()
    cc = os.environ.get("CC", "cc")
    out = C_CACHE / f"minimal_client-{hashlib.sha256(src + cc.encode()).hexdigest()[:12]}"
    if out.exists():
        return out
    if shutil.which(cc) is None:
        raise RuntimeError(f"no C compiler ({cc!r}) to build {C_SOURCE}: install gcc or set CC")
    C_CACHE.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    proc = subprocess.run([cc, "-O2", "-o", str(tmp), str(C_SOURCE)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"building {C_SOURCE} failed ({cc} -O2):\n{proc.stderr[-3000:]}")
    tmp.rename(out)
    return out


# ---------------------------------------------------------------------------------------------------------------
# CPU of one process over a window


def process_cpu_s(pid: int) -> float:
    """CPU seconds of every live thread of `pid` (nanosecond run time from schedstat, not 10-ms ticks)."""
    total = 0
    for task in os.scandir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError), open(f"{task.path}/schedstat", "rb") as f:
            total += int(f.read().split()[0])
    return total / 1e9


@dataclass
class CpuSampler:
    """Samples a process's CPU time every `period` s on a thread: (monotonic time, CPU seconds)."""

    pid: int
    period: float = 0.1
    samples: list[tuple[float, float]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> CpuSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), process_cpu_s(self.pid)))
            except OSError:  # the process is gone
                return
            self._stop.wait(self.period)

    def at(self, t: float) -> float:
        """CPU seconds at time `t`, interpolated between the samples around it."""
        s = self.samples
        if not s or t < s[0][0] or t > s[-1][0]:
            raise RuntimeError(f"no CPU samples around t={t:.3f} (have {len(s)})")
        for (t0, c0), (t1, c1) in zip(s, s[1:], strict=False):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
        return s[-1][1]


@dataclass
class Window:
    """What the server's truth log shows over the steady state: requests finished and token chunks written."""

    start: float
    end: float
    requests: int
    chunks: int
    tokens: int

    @property
    def seconds(self) -> float:
        return self.end - self.start


def truth_window(path: Path, latest_start: float = 0.0) -> Window:
    """The steady-state window of a run from its truth log: SETTLE_S after the first arrival (or `latest_start`,
    when later) until TAIL_S before the last chunk; what the server finished and wrote in it."""
    first = math.inf
    last = 0.0
    finishes: list[float] = []
    chunks: list[tuple[float, int]] = []
    with path.open("rb") as f:
        for line in f:
            r = orjson.loads(line)
            kind, t = r["kind"], r["t"]
            if kind == "token":
                chunks.append((t, r["n"]))
                last = max(last, t)
            elif kind == "arrival":
                first = min(first, t)
            elif kind == "finish":
                finishes.append(t)
    start, end = max(first + SETTLE_S, latest_start), last - TAIL_S
    if not end > start + 1.0:
        raise RuntimeError(f"run too short for a steady-state window ({path}): {start:.3f} .. {end:.3f}")
    inside = [n for t, n in chunks if start <= t < end]
    return Window(start, end, sum(1 for t in finishes if start <= t < end), len(inside), sum(inside))


# ---------------------------------------------------------------------------------------------------------------
# loadgen's worker


def _scenario(url: str, users: int, output_tokens: int, seconds: float, rate: float | None, report: Path) -> dict:
    load: dict[str, Any] = {
        "users": users,
        "spawn_rate": float(max(2 * users, 10)),
        "duration": f"{seconds + SETTLE_S:g}s",
        "warmup": f"{SETTLE_S:g}s",
    }
    if rate:
        load["arrival"] = {"kind": "poisson", "rate": rate}
    return {
        "name": "cpu",
        "seed": 1,
        "variants": [
            {
                "name": "bench",
                "base_url": url,
                "model": "bench",
                "dialect": "openai-chat",
                "continuous_usage_stats": True,
                "request_timeout": "120s",
                "read_timeout": "60s",
            }
        ],
        "traffic": {
            "mixes": [{"name": "cpu"}],
            "custom_mixes": {
                "cpu": {
                    "buckets": [{"name": "s", "prompt_tokens": [32, 32], "weight": 1}],
                    "output_tokens": [output_tokens, output_tokens],
                }
            },
        },
        "load": load,
        "slos": [],
        "report_dir": str(report),
    }


def _worker_of(pid: int, cores: Cores, deadline: float) -> int:
    """The run's Locust worker process (a grandchild): pinned to the client core, the rest of the tree elsewhere."""
    client = {int(c) for c in cores.client.split(",")}
    return pin_worker(pid, client, deadline, others={int(c) for c in cores.server.split(",")})


@dataclass
class ClientCpu:
    """A client process measured over the truth window."""

    cpu_s: float
    window: Window
    report: dict[str, Any] | None = None
    own: dict[str, Any] | None = None  # what the C client printed


def run_loadgen(server: ServerRun, cores: Cores, workdir: Path, scenario: dict[str, Any], timeout: float) -> ClientCpu:
    path = workdir / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario, sort_keys=False))
    cmd = [sys.executable, "-m", "loadgen.cli", "run", str(path), "--quiet", "--workers", "1"]
    env = {**os.environ, "PYTHONPATH": str(CODE)}
    with (workdir / "client.log").open("wb") as log:
        proc = subprocess.Popen(cmd, cwd=CODE, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            worker = _worker_of(proc.pid, cores, time.monotonic() + 30)
            with CpuSampler(worker) as sampler:
                proc.wait(timeout=timeout)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    report_file = Path(scenario["report_dir"]) / "report.json"
    if not report_file.exists():
        raise RuntimeError(f"loadgen wrote no report (exit {proc.returncode}): {(workdir / 'client.log').read_text()}")
    return ClientCpu(0.0, Window(0, 0, 0, 0, 0), orjson.loads(report_file.read_bytes()), {"samples": sampler})


def run_c(binary: Path, server: ServerRun, cores: Cores, streams: int, output_tokens: int, seconds: float) -> ClientCpu:
    cmd = cores.pin(
        cores.client,
        [str(binary), "--port", str(server.port), "--streams", str(streams), "--seconds", f"{seconds + SETTLE_S:g}"]
        + ["--max-tokens", str(output_tokens), "--prompt-words", "32"],
    )
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with CpuSampler(proc.pid) as sampler:
        out, err = proc.communicate(timeout=seconds + 60)
    if proc.returncode != 0:
        raise RuntimeError(f"minimal C client failed (exit {proc.returncode}): {out.decode()[-1000:]}{err.decode()}")
    return ClientCpu(0.0, Window(0, 0, 0, 0, 0), None, {"samples": sampler, **orjson.loads(out.splitlines()[-1])})


def measured(run: ClientCpu, server: ServerRun) -> ClientCpu:
    """The client's CPU over the truth window (the server has stopped and written its truth)."""
    sampler: CpuSampler = (run.own or {}).pop("samples")
    window = truth_window(server.truth, latest_start=sampler.samples[0][0] if sampler.samples else 0.0)
    window.end = min(window.end, sampler.samples[-1][0])
    run.window = window
    run.cpu_s = sampler.at(window.end) - sampler.at(window.start)
    return run


# ---------------------------------------------------------------------------------------------------------------
# The two parts


@dataclass
class Settings:
    seconds: float = 8.0
    rate: float = 1000.0
    ttft_ms: float = 5.0
    itl_ms: float = 1.0
    chunk_streams: tuple[int, ...] = (64, 256)
    offered_chunks_s: float = 128_000.0  # all streams together: each stream a chunk every streams / this s
    chunk_tokens: int = 256
    cores: Cores = field(default_factory=Cores)


def request_row(
    s: Settings, loop: str, tokens: int, workdir: Path, client: str = "loadgen", binary: Path | None = None
) -> dict[str, Any]:
    """One request row: loadgen's worker, or (`client="C"`, closed loop only) the minimal C client with as many
    streams as loadgen would have users."""
    per_request_s = (s.ttft_ms + tokens * s.itl_ms) / 1e3
    if loop == "closed":
        users, rate = max(1, round(s.rate * per_request_s)), None
    else:
        users, rate = max(64, int(s.rate * per_request_s * 4) + 16), s.rate
    with bench_server(
        workdir / "server", s.cores, itl_ms=s.itl_ms, k=1, ttft_ms=s.ttft_ms, output_tokens=tokens
    ) as srv:
        if client == "C":
            assert binary is not None and rate is None
            run = run_c(binary, srv, s.cores, users, tokens, s.seconds)
        else:
            scenario = _scenario(srv.base_url, users, tokens, s.seconds, rate, workdir / "report")
            run = run_loadgen(srv, s.cores, workdir, scenario, timeout=s.seconds * 6 + 60)
    run = measured(run, srv)
    w = run.window
    row: dict[str, Any] = {
        "client": client,
        "loop": loop,
        "tokens": tokens,
        "users": users,
        "rate": rate,
        "cpu_us_per_request": 1e6 * run.cpu_s / max(w.requests, 1),
        "requests_per_s": w.requests / w.seconds,
        "cpu_percent": 100 * run.cpu_s / w.seconds,
        "window_s": w.seconds,
        "requests": w.requests,
        "chunks": w.chunks,
        "worker_cpu_s": run.cpu_s,
        "server_late_p99_ms": srv.stats.get("late_p99_ms"),
        "server_busy": srv.stats.get("busy_fraction"),
    }
    if run.report is not None:
        ok = run.report["variants"][0]["overall"]
        row["report_requests"] = ok.get("requests")
        row["errors"] = ok.get("errors")
        row["trustworthy"] = run.report["run"]["trustworthy"]
        row["untrustworthy_reasons"] = run.report["run"]["untrustworthy_reasons"]
    if client == "C":
        row["c_client"] = run.own
        row["trustworthy"] = (run.own or {}).get("errors") == 0  # it judges nothing but its own errors
    return row


def chunk_row(s: Settings, client: str, streams: int, k: int, workdir: Path, binary: Path | None) -> dict[str, Any]:
    itl_ms = 1e3 * streams / s.offered_chunks_s / k
    with bench_server(
        workdir / "server",
        s.cores,
        itl_ms=itl_ms,
        k=k,
        ttft_ms=1.0,
        output_tokens=s.chunk_tokens,
        force_output=True,
    ) as srv:
        if client == "C":
            assert binary is not None
            run = run_c(binary, srv, s.cores, streams, s.chunk_tokens, s.seconds)
        else:
            scenario = _scenario(srv.base_url, streams, s.chunk_tokens, s.seconds, None, workdir / "report")
            run = run_loadgen(srv, s.cores, workdir, scenario, timeout=s.seconds * 6 + 60)
    run = measured(run, srv)
    w = run.window
    row: dict[str, Any] = {
        "client": client,
        "streams": streams,
        "k": k,
        "chunks_per_cpu_s": w.chunks / run.cpu_s if run.cpu_s > 0 else None,
        "chunks_per_s": w.chunks / w.seconds,
        "offered_chunks_per_s": s.offered_chunks_s,
        "itl_ms": itl_ms,
        "cpu_percent": 100 * run.cpu_s / w.seconds,
        "window_s": w.seconds,
        "chunks": w.chunks,
        "tokens": w.tokens,
        "requests": w.requests,
        "client_cpu_s": run.cpu_s,
        "server_late_p99_ms": srv.stats.get("late_p99_ms"),
        "server_busy": srv.stats.get("busy_fraction"),
    }
    if run.report is not None:
        row["trustworthy"] = run.report["run"]["trustworthy"]
        row["errors"] = run.report["variants"][0]["overall"].get("errors")
    if run.own is not None:
        row["c_client"] = run.own  # its own counts over the whole run and getrusage
    return row


# ---------------------------------------------------------------------------------------------------------------


def _span(values: list[float]) -> str:
    """A figure's range over the sittings (`min–max`; one value when they agree), – when there is none."""
    if not values:
        return "–"
    if min(values) == max(values):
        return fmt(values[0], 0)
    return f"{min(values):.0f}–{max(values):.0f}"


def _ratio_span(entry: dict[str, Any]) -> str:
    """A summary entry's loadgen-against-C ratios over the sittings (`0.62–0.65`), empty when there are none."""
    return "–".join(f"{x:.2f}" for x in sorted(set(entry.get("ratio", []))))


def summarize(request_rows: list[dict[str, Any]], chunk_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each configuration's figures over the sittings: [min, max], and loadgen / C per (streams, k)."""
    out: dict[str, Any] = {"request": {}, "chunks": {}}
    for key in dict.fromkeys((r["loop"], r["tokens"]) for r in request_rows):
        mine = [r for r in request_rows if (r["loop"], r["tokens"], r.get("client", "loadgen")) == (*key, "loadgen")]
        c = [r for r in request_rows if (r["loop"], r["tokens"], r.get("client")) == (*key, "C")]
        entry: dict[str, Any] = {
            "sittings": len(mine),
            **{
                name: [min(r[name] for r in mine), max(r[name] for r in mine)]
                for name in ("cpu_us_per_request", "requests_per_s", "cpu_percent")
            },
            "trustworthy": sum(1 for r in mine if r["trustworthy"]),
        }
        if c:
            # The C client's CPU per request over loadgen's, per sitting (measured beside it): loadgen's share of
            # the floor, as `loadgen/C` is for chunks.
            entry["C_cpu_us_per_request"] = [
                min(r["cpu_us_per_request"] for r in c),
                max(r["cpu_us_per_request"] for r in c),
            ]
            ratios = [b["cpu_us_per_request"] / a["cpu_us_per_request"] for a, b in zip(mine, c, strict=False)]
            entry["ratio"] = [min(ratios), max(ratios)]
        out["request"][f"{key[0]}-{key[1]}"] = entry
    for streams, k in dict.fromkeys((r["streams"], r["k"]) for r in chunk_rows):
        lg = [r for r in chunk_rows if (r["streams"], r["k"], r["client"]) == (streams, k, "loadgen")]
        c = [r for r in chunk_rows if (r["streams"], r["k"], r["client"]) == (streams, k, "C")]
        entry = {}
        for name, rows in (("loadgen", lg), ("C", c)):
            vals = [r["chunks_per_cpu_s"] for r in rows if r["chunks_per_cpu_s"]]
            if vals:
                entry[name] = [min(vals), max(vals)]
        # Per sitting, loadgen against the C client measured beside it.
        ratios = [a["chunks_per_cpu_s"] / b["chunks_per_cpu_s"] for a, b in zip(lg, c, strict=False)]
        if ratios:
            entry["ratio"] = [min(ratios), max(ratios)]
        out["chunks"][f"{streams}x-k{k}"] = entry
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="measured window per row (plus 2 s of settling)")
    ap.add_argument("--sittings", type=int, default=1, help="run every row this many times in turn (the ranges)")
    ap.add_argument("--parts", default="request,chunks", help="request, chunks (comma-separated)")
    ap.add_argument("--rate", type=float, default=1000.0, help="request rows: open-loop rate, closed-loop pace")
    ap.add_argument("--streams", default="64,256", help="chunks rows: concurrent streams")
    ap.add_argument("--offered", type=float, default=128_000.0, help="chunks rows: chunks/s the server sends in all")
    ap.add_argument("--server-cpu", default="0")
    ap.add_argument("--client-cpu", default="1")
    ap.add_argument("--openloop", action="store_true", help="also run bench.openloop at 1k/2.5k/5k/10k req/s")
    ap.add_argument("--out", default="cpu", help="results name: bench/results/NAME.json")
    ap.add_argument(
        "--commit",
        default="",
        help="measure this commit's loadgen (a temporary worktree, its C half built) instead of the checkout's",
    )
    args = ap.parse_args()
    with contextlib.ExitStack() as stack:
        if args.commit:
            tree = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            stack.callback(
                subprocess.run, ["git", "worktree", "remove", "--force", str(tree / "before")], cwd=REPO, check=False
            )
            global CODE
            CODE = _worktree(args.commit, tree)
            where = subprocess.run(
                [sys.executable, "-c", "import loadgen.protocol._wire as w; print(w.__file__)"],
                cwd=CODE,
                env={**os.environ, "PYTHONPATH": str(CODE)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            if not where.startswith(str(CODE)):
                raise SystemExit(f"the worktree's loadgen is not the one imported ({where})")
        _main(args)


def _main(args: argparse.Namespace) -> None:
    parts = set(args.parts.split(","))
    cores = Cores(args.server_cpu, args.client_cpu)
    if set(cores.server.split(",")) & set(cores.client.split(",")):
        raise SystemExit("--server-cpu and --client-cpu must not share a core")
    s = Settings(
        seconds=args.seconds,
        rate=args.rate,
        chunk_streams=tuple(int(x) for x in args.streams.split(",")),
        offered_chunks_s=args.offered,
        cores=cores,
    )
    machine = machine_info()  # before the pinning below: it counts the cores this process may use
    # The sampling thread and this process stay off the client's core.
    with contextlib.suppress(OSError, ValueError):
        os.sched_setaffinity(0, {int(c) for c in cores.server.split(",")})
    binary = build_minimal_client() if parts & {"chunks", "request"} else None
    if CODE != REPO:
        machine["commit"] = _commit(CODE)
        machine["dirty"] = False
        machine["measured_tree"] = "worktree of --commit"
    request_rows: list[dict[str, Any]] = []
    chunk_rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for sitting in range(1, args.sittings + 1):
            if "request" in parts:
                for loop in ("closed", "open"):
                    for tokens in (1, 64):
                        for client in ("loadgen", "C") if loop == "closed" else ("loadgen",):
                            d = Path(tmp) / f"req-{client}-{loop}-{tokens}-{sitting}"
                            row = {"sitting": sitting, **request_row(s, loop, tokens, d, client, binary)}
                            request_rows.append(row)
                            print(
                                f"[{sitting}] {client:7} {loop:6} loop, {tokens:2} tokens: "
                                f"{row['cpu_us_per_request']:.0f} µs CPU per request at {row['requests_per_s']:.0f} "
                                f"req/s ({row['cpu_percent']:.0f} % CPU), trustworthy {row['trustworthy']}",
                                flush=True,
                            )
            if "chunks" in parts:
                for streams in s.chunk_streams:
                    for k in (1, 4):
                        for client in ("loadgen", "C"):
                            d = Path(tmp) / f"chunks-{client}-{streams}-{k}-{sitting}"
                            row = {"sitting": sitting, **chunk_row(s, client, streams, k, d, binary)}
                            chunk_rows.append(row)
                            print(
                                f"[{sitting}] {client:7} {streams:4} streams k={k}: "
                                f"{row['chunks_per_cpu_s'] or 0:,.0f} chunks per CPU-s "
                                f"({row['chunks_per_s']:,.0f} chunks/s at {row['cpu_percent']:.0f} % CPU; "
                                f"server late p99 {fmt(row['server_late_p99_ms'], 2)} ms)",
                                flush=True,
                            )
    summary = summarize(request_rows, chunk_rows)
    if request_rows:
        print_table(
            f"CPU per request, one worker process ({machine['cpu_model']})",
            ["loop", "tokens", "µs CPU / request", "req/s", "worker CPU %", "trustworthy", "C client µs", "C/loadgen"],
            [
                [
                    loop,
                    tokens,
                    _span(e["cpu_us_per_request"]),
                    _span(e["requests_per_s"]),
                    _span(e["cpu_percent"]),
                    f"{e['trustworthy']}/{e['sittings']}",
                    _span(e.get("C_cpu_us_per_request", [])),
                    _ratio_span(e) or "–",
                ]
                for key, e in summary["request"].items()
                for loop, tokens in [key.split("-")]
            ],
        )
    if chunk_rows:
        rows = []
        for key, entry in summary["chunks"].items():
            streams, k = key.split("x-k")
            mine = [r for r in chunk_rows if (str(r["streams"]), str(r["k"])) == (streams, k)]
            rows.append(
                [
                    streams,
                    k,
                    _span([v / 1e3 for v in entry.get("loadgen", [])]) + "k",
                    _span([v / 1e3 for v in entry.get("C", [])]) + "k",
                    _ratio_span(entry) + "×",
                    _span([r["cpu_percent"] for r in mine if r["client"] == "loadgen"]),
                    _span([r["cpu_percent"] for r in mine if r["client"] == "C"]),
                    f"{max(r['server_late_p99_ms'] or 0 for r in mine):.2f}",
                ]
            )
        print_table(
            f"Chunks per CPU-second of the client, {s.chunk_tokens}-token replies, {s.offered_chunks_s:,.0f} chunks/s "
            f"offered ({machine['cpu_model']})",
            ["streams", "k", "loadgen", "C client", "loadgen/C", "loadgen CPU %", "C CPU %", "server late p99 ms"],
            rows,
        )
    results = {
        "settings": {
            "seconds": s.seconds,
            "settle_s": SETTLE_S,
            "rate": s.rate,
            "ttft_ms": s.ttft_ms,
            "itl_ms": s.itl_ms,
            "offered_chunks_per_s": s.offered_chunks_s,
            "chunk_tokens": s.chunk_tokens,
            "server_cpu": cores.server,
            "client_cpu": cores.client,
            "c_client": str(C_SOURCE.relative_to(REPO)),
        },
        "summary": summary,
        "request": request_rows,
        "chunks": chunk_rows,
    }
    print(f"(results: {write_results(args.out, results, machine)})")
    if args.openloop:
        subprocess.run(
            [sys.executable, "-m", "bench.openloop", "--rates", "1000,2500,5000,10000", "--seconds", f"{s.seconds:g}"],
            cwd=REPO,
            check=True,
        )


if __name__ == "__main__":
    main()
