"""Shared pieces of the bench runner: CPU pinning, the ground-truth server's lifetime, timing a client's CPU, stats."""

from __future__ import annotations

import contextlib
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
# The peers' virtualenvs (bench/peer_install.py), git-ignored.
VENVS = Path(os.environ.get("BENCH_VENVS", str(REPO / ".cache" / "peers")))
# Kept in the repo: a figure in docs/ or bench/README.md must be one of these files' numbers.
RESULTS = REPO / "bench" / "results"


def machine_info() -> dict[str, Any]:
    """What a figure depends on besides the code: CPU model, cores, kernel, Python, and the commit measured."""
    cpu = "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=True)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip()

    dirty = git("status", "--porcelain", "--", "loadgen", "bench", ":!bench/results")
    return {
        "cpu_model": cpu,
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "commit": git("rev-parse", "HEAD"),
        # Uncommitted changes to the code measured: the figures are then not those of `commit`.
        "dirty": None if dirty is None else bool(dirty),
        "load_average_1m": round(os.getloadavg()[0], 2),
    }


def write_results(name: str, results: dict[str, Any], machine: dict[str, Any] | None = None) -> Path:
    """Write bench/results/NAME.json: the results, with the machine they were measured on and when."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    doc = {
        "bench": name,
        "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": machine or machine_info(),
        "results": results,
    }
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY, default=str) + b"\n")
    return path


@dataclass
class Cores:
    """Which CPUs the server and the client get (`taskset -c`); empty = not pinned."""

    server: str = "0"
    client: str = "1"

    def pin(self, cpus: str, cmd: Sequence[str]) -> list[str]:
        if cpus and shutil.which("taskset"):
            return ["taskset", "-c", cpus, *cmd]
        return list(cmd)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def load_average() -> float:
    return os.getloadavg()[0]


def busy_fraction(seconds: float = 1.0) -> float:
    """Share of all CPUs busy over the next `seconds` (from /proc/stat): other people's load, between our runs
    (the load average still remembers our own last run for minutes)."""

    def snap() -> tuple[int, int]:
        with open("/proc/stat") as f:
            vals = [int(x) for x in f.readline().split()[1:]]
        idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
        return idle, sum(vals)

    i0, t0 = snap()
    time.sleep(seconds)
    i1, t1 = snap()
    return 1.0 - (i1 - i0) / max(t1 - t0, 1)


@dataclass
class ServerRun:
    port: int
    truth: Path
    stats_path: Path
    proc: subprocess.Popen[bytes]
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def bench_server(
    workdir: Path,
    cores: Cores,
    *,
    itl_ms: float,
    k: int,
    ttft_ms: float = 20.0,
    output_tokens: int = 64,
    force_output: bool = False,
    procs: int = 1,
    truth: bool = True,
) -> Iterator[ServerRun]:
    """Start `bench.server` pinned to the server cores; on exit stop it and read its stats (truth file written)."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    ready = workdir / "server.ready"
    ready.unlink(missing_ok=True)
    truth_path = workdir / "truth.jsonl"
    stats_path = workdir / "server-stats.json"
    cmd = [
        sys.executable,
        "-m",
        "bench.server",
        "--port",
        str(port),
        "--itl-ms",
        str(itl_ms),
        "--k",
        str(k),
        "--ttft-ms",
        str(ttft_ms),
        "--output-tokens",
        str(output_tokens),
        "--procs",
        str(procs),
        "--stats",
        str(stats_path),
        "--ready-file",
        str(ready),
    ]
    if force_output:
        cmd += ["--force-output-tokens", str(output_tokens)]
    if truth:
        cmd += ["--truth", str(truth_path)]
    log = open(workdir / "server.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(cores.pin(cores.server, cmd), cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
    run = ServerRun(port, truth_path, stats_path, proc)
    try:
        deadline = time.monotonic() + 15
        while not ready.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"bench server did not start: {(workdir / 'server.log').read_text()[-2000:]}")
            time.sleep(0.02)
        time.sleep(0.05 * procs)
        yield run
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        if procs == 1 and stats_path.exists():
            run.stats = orjson.loads(stats_path.read_bytes())
        elif procs > 1:
            parts = [orjson.loads(p.read_bytes()) for p in workdir.glob("server-stats.json.*")]
            run.stats = {
                "requests": sum(p["requests"] for p in parts),
                "chunks": sum(p["chunks"] for p in parts),
                "late_p99_ms": max((p["late_p99_ms"] for p in parts), default=0.0),
                "cpu_s": sum(p["cpu_s"] for p in parts),
            }
            if truth:
                with truth_path.open("wb") as out:
                    for p in sorted(workdir.glob("truth.jsonl.*")):
                        out.write(p.read_bytes())


@dataclass
class ClientRun:
    returncode: int
    wall_s: float
    cpu_s: float
    output: str

    @property
    def cpu_percent(self) -> float:
        return 100.0 * self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0


def run_client(
    cmd: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    timeout: float = 180,
    cwd: Path = REPO,
    log: Path | None = None,
    samples: list[tuple[float, float]] | None = None,
) -> ClientRun:
    """Run a client to completion; its CPU is the children's rusage delta (the whole process tree it reaped).

    With `samples`, the CPU of the client's process tree (user + sys of every live member, plus what they reaped) is
    appended every 0.25 s as (monotonic time, CPU seconds): the CPU of a steady-state window, without the tool's
    start-up (imports, tokenizer, worker processes), is the difference across it."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    full_env = {**os.environ, **(env or {})}
    if samples is None:
        proc = subprocess.run(list(cmd), cwd=cwd, env=full_env, capture_output=True, timeout=timeout, check=False)
        returncode, raw = proc.returncode, proc.stdout + proc.stderr
    else:
        returncode, raw = _run_sampled(list(cmd), cwd, full_env, timeout, samples)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = raw.decode("utf-8", "replace")
    if log is not None:
        log.write_text(out)
    return ClientRun(returncode, wall, cpu, out)


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def tree_cpu_s(root: int) -> float:
    """CPU seconds of a process and its live descendants (utime + stime + the children they reaped), from /proc.
    By parentage, not process group: a tool's workers may start sessions of their own."""
    stats: dict[int, tuple[int, int]] = {}  # pid -> (ppid, ticks)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # After the name: state, ppid, …; utime, stime, cutime, cstime are the 12th to 15th.
        stats[int(entry.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
            todo += children.get(pid, [])
    return total / _TICK


def _run_sampled(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float, samples: list[tuple[float, float]]
) -> tuple[int, bytes]:
    import tempfile

    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            samples.append((time.monotonic(), tree_cpu_s(proc.pid)))
            if time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            time.sleep(0.25)
        with contextlib.suppress(ProcessLookupError):  # helpers the tool left behind
            os.killpg(proc.pid, signal.SIGKILL)
        out.seek(0)
        return proc.returncode, out.read()


def quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def weighted_quantile(pairs: Sequence[tuple[float, int]], q: float) -> float:
    """Quantile of samples given as (value, weight): a chunk of k tokens is k per-token samples."""
    if not pairs:
        return float("nan")
    s = sorted(pairs)
    total = sum(w for _, w in s)
    target = q * total
    acc = 0
    for v, w in s:
        acc += w
        if acc > target:
            return v
    return s[-1][0]


def fmt(v: float | None, digits: int = 1) -> str:
    if v is None or v != v:  # NaN
        return "—"
    return f"{v:.{digits}f}"


def print_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = [f"\n## {title}", "| " + " | ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)) + " |"]
    lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
    text = "\n".join(lines)
    print(text, flush=True)
    return text
