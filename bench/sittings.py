"""Before and after, sitting by sitting: does a change move the hot path or the fidelity beyond run-to-run noise?

`python -m bench.sittings BEFORE [--after TREE] [--sittings 5] [--parts hotpath,fidelity,openloop] [--name NAME]`

This VM (2-core AMD EPYC) swings between two speeds from one minute to the next (the same `bench.hotpath` row reads
3.4 µs in one sitting and 5.7 µs in the next), so one before/after pair can show a change the code did not make. The
two trees — BEFORE (a commit, checked out in a temporary worktree with its C half built in place) and this working
tree (or TREE, a checkout with its C half built) — are measured in alternating sittings, which of the two goes first
alternating too, and each figure's range over the sittings is set beside the other tree's: ranges that overlap are
within the noise of this machine; where the after median falls against the before range (below, inside, above: every
figure is better lower) says which way a shift points. Each sitting runs, per tree, in a fresh interpreter:

- `hotpath`: `python -m bench.hotpath` (µs per chunk, per request, per merged blob);
- `fidelity`: `bench/run.py --parts fidelity --clients loadgen --k 4 --seconds 5 --streams 32,256` (added TTFT and
  ITL-error p99 against the bench server's truth, loop-lag p99, CPU);
- `openloop`: `python -m bench.openloop --rates 1000` (send lag, schedule slip and loop lag p99 at 1,000 req/s, and the
  worker's CPU per request it sent: its runtime's CPU mean over the window / the rate it achieved).

Writes bench/results/sittings-NAME.json (every sitting's figures, the ranges, the machine, both commits).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench.common import REPO, machine_info, write_results

_HOTPATH_ROW = re.compile(r"^(.+?\))\s+([0-9.; ]+)$")


def _env(tree: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(tree)}


def _hotpath(tree: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-m", "bench.hotpath"], cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=900
    )
    if out.returncode != 0:
        raise RuntimeError(f"bench.hotpath in {tree} failed: {out.stderr[-2000:]}")
    rows: dict[str, float] = {}
    for line in out.stdout.splitlines():
        m = _HOTPATH_ROW.match(line.strip())
        if m:  # "25.3; 0.39" (per request; per chunk): the first figure
            rows[m.group(1)] = float(m.group(2).split(";")[0])
    return rows


def _fidelity(tree: Path, work: Path) -> dict[str, float]:
    work.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "bench/run.py", "--parts", "fidelity", "--clients", "loadgen", "--k", "4"]
    cmd += ["--seconds", "5", "--streams", "32,256", "--out", str(work), "--max-load", "1.5"]
    out = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=1200)
    if out.returncode != 0:
        raise RuntimeError(f"bench/run.py fidelity in {tree} failed: {out.stderr[-2000:]}")
    doc = orjson.loads((work / "results.json").read_bytes())
    rows: dict[str, float] = {}
    for r in doc["fidelity"]:
        s = r["streams"]
        rows[f"added TTFT p99, {s} streams (ms)"] = r["added"].get("ttft_p99", float("nan"))
        rows[f"ITL error p99, {s} streams (ms)"] = r["added"].get("itl_p99", float("nan"))
        rows[f"loop lag p99, {s} streams (ms)"] = r["lag_p99_ms"]
        rows[f"client CPU, {s} streams (%)"] = r["cpu_percent"]
    return rows


def _openloop(tree: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "bench.openloop", "--rates", "1000", "--seconds", "8", "--spawn-users", "10"]
    out = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"bench.openloop in {tree} failed: {out.stderr[-2000:]}")
    row = orjson.loads((tree / "bench" / "results" / "openloop.json").read_bytes())["results"]["precision"][0]
    return {
        "open loop 1,000 req/s: send lag p99 (ms)": row["send_lag_ms"]["p99"],
        "open loop 1,000 req/s: schedule slip p99 (ms)": row["schedule_slip_ms"]["p99"],
        "open loop 1,000 req/s: loop lag p99 (ms)": row["loop_lag_p99_ms"],
        # The worker's own CPU (its runtime's samples, mean over the window) per request it sent.
        "open loop 1,000 req/s: worker CPU per request (µs)": round(
            row["worker_cpu_percent"]["mean"] / 100 / row["achieved_rate_per_s"] * 1e6, 1
        ),
    }


def _worktree(commit: str, where: Path) -> Path:
    tree = where / "before"
    subprocess.run(["git", "worktree", "add", "--detach", "-q", str(tree), commit], cwd=REPO, check=True)
    subprocess.run(
        [sys.executable, "-c", "from setuptools import setup; setup()", "build_ext", "--inplace", "-q"],
        cwd=tree, check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    return tree


def _commit(tree: Path) -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=tree, capture_output=True, text=True).stdout.strip()


def _ranges(sittings: list[dict[str, dict[str, float]]]) -> list[dict[str, Any]]:
    names = list(dict.fromkeys(k for s in sittings for side in s.values() for k in side))
    rows = []
    for name in names:
        before = [s["before"][name] for s in sittings if name in s["before"]]
        after = [s["after"][name] for s in sittings if name in s["after"]]
        if not before or not after:
            continue
        lo_b, hi_b, lo_a, hi_a = min(before), max(before), min(after), max(after)
        med = statistics.median(after)
        rows.append({
            "figure": name,
            "before": [round(lo_b, 3), round(hi_b, 3)],
            "after": [round(lo_a, 3), round(hi_a, 3)],
            "median_before": round(statistics.median(before), 3),
            "median_after": round(med, 3),
            # The two ranges overlap: no sitting of one tree lies beyond every sitting of the other.
            "within_noise": lo_a <= hi_b and lo_b <= hi_a,
            # Where the after median lies against the before range (every figure here is better lower).
            "median_after_vs_before_range": "below" if med < lo_b else "above" if med > hi_b else "inside",
        })  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", help="the commit to compare this working tree with")
    ap.add_argument("--after", default=str(REPO), help="the tree measured as after (default: this one)")
    ap.add_argument("--sittings", type=int, default=5)
    ap.add_argument("--parts", default="hotpath,fidelity", help="comma list of hotpath, fidelity, openloop")
    ap.add_argument("--name", default="", help="results file: bench/results/sittings-NAME.json")
    args = ap.parse_args()
    parts = args.parts.split(",")
    machine = machine_info()
    sittings: list[dict[str, dict[str, float]]] = []
    with tempfile.TemporaryDirectory() as tmp:
        before = _worktree(args.before, Path(tmp))
        try:
            trees = {"before": before, "after": Path(args.after)}
            commits = {side: _commit(tree) for side, tree in trees.items()}
            for i in range(args.sittings):
                sitting: dict[str, dict[str, float]] = {}
                # Before first in the 1st, 3rd, ... sitting, after first in the others: this VM slows and speeds up
                # over minutes, and a fixed order would hand the drift to one side.
                order = list(trees.items())
                if i % 2:
                    order.reverse()
                for side, tree in order:
                    figures: dict[str, float] = {}
                    if "hotpath" in parts:
                        figures.update(_hotpath(tree))
                    if "fidelity" in parts:
                        figures.update(_fidelity(tree, Path(tmp) / f"fid-{side}-{i}"))
                    if "openloop" in parts:
                        figures.update(_openloop(tree))
                    sitting[side] = figures
                sittings.append(sitting)
                print(f"sitting {i + 1} of {args.sittings} done", flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=REPO, check=False)
    rows = _ranges(sittings)
    for r in rows:
        verdict = "ranges overlap" if r["within_noise"] else "APART"
        verdict += f", after's median {r['median_after_vs_before_range']} before's range"
        b, a = r["before"], r["after"]
        print(f"{r['figure']:64s} before {b[0]}–{b[1]}  after {a[0]}–{a[1]}  {verdict}")
    name = args.name or "-".join(parts)
    results = {"commits": commits, "parts": parts, "sittings": sittings, "ranges": rows}
    print(f"(results: {write_results(f'sittings-{name}', results, machine)})")


if __name__ == "__main__":
    main()
