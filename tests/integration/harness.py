"""Shared helpers for loopback integration tests: write a scenario, run `loadgen run`, read what it produced."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import yaml

from loadgen.sim.truth import TruthRequest

from ..report_schema import checked

_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serving_bench(folder: Path, *args: str) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """bench/server.py with `args` on a free port, once it wrote its ready file in `folder`: (port, process). Stopped
    on the way out by SIGTERM, at which it writes its truth log (a caller may have stopped it already)."""
    port, ready = free_port(), folder / "ready"
    cmd = [sys.executable, "-m", "bench.server", "--port", str(port), *args, "--ready-file", str(ready)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(_ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.Popen(cmd, cwd=_ROOT, env=env, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while not ready.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
            time.sleep(0.05)
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def write_scenario(path: Path, variants: Mapping[str, str | dict[str, Any]], **over: Any) -> Path:
    """A short, dense scenario: short prompts and outputs so a few seconds hold many requests.

    ``variants`` maps a name to its base URL, or to a dict of variant fields (``base_url`` and e.g. ``dialect``)
    that are merged over the defaults.
    """
    doc: dict[str, Any] = {
        "name": "itest",
        "seed": 7,
        "variants": [
            {"name": n, "model": "loadgen-sim", "continuous_usage_stats": True}
            | ({"base_url": v} if isinstance(v, str) else v)
            for n, v in variants.items()
        ],
        "traffic": {
            "mixes": [{"name": "short", "weight": 1}],
            "custom_mixes": {
                "short": {
                    "buckets": [{"name": "s", "prompt_tokens": [30, 120], "weight": 1}],
                    "output_tokens": [20, 60],
                }
            },
        },
        "load": {"users": 16, "spawn_rate": 100, "duration": "6s", "warmup": 0},
        "report_dir": str(path.parent / "report"),
    }
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(doc.get(key), dict):
            doc[key].update(value)
        else:
            doc[key] = value
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def run_loadgen(
    scenario: Path, *args: str, timeout: float = 120, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``loadgen run SCENARIO --quiet ARGS``; ``env`` replaces the environment (None: inherit)."""
    return subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "run", str(scenario), "--quiet", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else dict(env),
    )


def read_records(directory: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for shard in sorted(directory.glob("records-*.jsonl")):
        rows += [orjson.loads(line) for line in shard.read_bytes().splitlines() if line.strip()]
    return rows


def read_report(report_dir: Path) -> dict[str, Any]:
    """The run's report.json, checked against the published schema (every integration test's report is)."""
    return checked(orjson.loads((report_dir / "report.json").read_bytes()))


def verdict_why(report_dir: Path) -> str:
    """What a run's report says against a pass, for an assertion's message: `--quiet` prints nothing, so a run that
    exits 1 (a breach) or 3 (untrustworthy) would otherwise fail a test without a word of why."""
    path = report_dir / "report.json"
    if not path.exists():
        return f"no {path}"
    report = orjson.loads(path.read_bytes())
    run = report.get("run", {})
    failed_slos = [
        (s.get("variant"), s.get("slo"), s.get("observed_ms", s.get("observed_percent")))
        for s in report.get("slos", [])
        if not s.get("passed")
    ]
    errors = {
        v["name"]: (v["overall"].get("requests"), v["overall"].get("ok"), v["overall"].get("errors"))
        for v in report.get("variants", [])
    }
    return (
        f"failed={run.get('failed')} target_breaches={run.get('target_breaches')} "
        f"untrustworthy={run.get('untrustworthy_reasons')} failed_slos={failed_slos} requests/ok/errors={errors}"
    )


def hdr_rank_percentile(values: list[float], p: float) -> float:
    """The exact sample hdrhistogram's percentile rule picks: rank round(p % of N), at least 1."""
    s = sorted(values)
    return s[max(1, int(p * len(s) / 100 + 0.5)) - 1]


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _outside(x: float, lo: float, hi: float) -> float:
    """How far ``x`` lies outside [lo, hi] (negative below it, 0 inside)."""
    return x - lo if x < lo else (x - hi if x > hi else 0.0)


def compare_with_truth(records: list[dict[str, Any]], truth: dict[str, TruthRequest]) -> dict[str, list[float]]:
    """Per-request errors of loadgen's timestamps against the simulator's writes (seconds).

    The simulator reads its clock just before and just after each write (``chunk_times``, ``chunk_ends``): the bytes
    left inside that interval, which is a few microseconds wide unless the simulator itself was held up between the
    two reads (its truth-log thread holding the GIL, a CPU busy with other work) — a delay of the server, which a
    client that stamps arrivals exactly sees as it is. An error is how far loadgen's value lies outside the interval:
    TTFT error = client first-token arrival outside [write start, write end] of the first chunk (both TTFTs share
    the client's `sent`); ITL error = per-token gap seen by the client outside the range of gaps the writes allow,
    chunk by chunk.
    """
    ttft_err: list[float] = []
    itl_err: list[float] = []
    icl_err: list[float] = []
    for r in records:
        if r["error"] is not None or r.get("cut_by_stop"):
            continue
        t = truth[r["id"]]
        assert r["chunk_tokens"] == t.chunk_tokens, r["id"]
        c, s, e, n = r["chunk_times"], t.chunk_times, t.chunk_ends, t.chunk_tokens
        ttft_err.append(_outside(c[0], s[0], e[0]))
        for i in range(1, len(c)):
            gap = _outside(c[i] - c[i - 1], s[i] - e[i - 1], e[i] - s[i - 1])
            icl_err.append(gap)
            itl_err.append(gap / n[i])
    return {"ttft": ttft_err, "itl": itl_err, "icl": icl_err}


def agent_step_of(rid: str) -> tuple[str, str, str, int]:
    """(variant, task key `stream-index`, sub-agent path ("" the top-level agent), step) of an agent task's record id
    (`{worker}-{variant}-{stream}-{index}[-b{path}][-t{step}]`)."""
    turn = 1
    head, last = rid.rsplit("-", 1)
    if last.startswith("t") and last[1:].isdigit():
        rid, turn = head, int(last[1:])
    branch = ""
    head, last = rid.rsplit("-", 1)
    if last.startswith("b"):
        rid, branch = head, last[1:]
    rest, stream, index = rid.rsplit("-", 2)
    return rest.rsplit("-", 1)[-1], f"{stream}-{index}", branch, turn


def agent_tasks(records: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, dict[int, dict[str, Any]]]]:
    """(variant, task) -> sub-agent path ("" the top-level agent) -> step -> record."""
    out: dict[tuple[str, str], dict[str, dict[int, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for r in records:
        variant, task, branch, step = agent_step_of(r["id"])
        out[(variant, task)][branch][step] = r
    return out
