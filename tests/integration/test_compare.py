"""Variant comparison and `loadgen compare` against the simulator.

One run of three variants on the same seeded requests: `twin` is a second engine of the baseline profile, `int8`
the quantized profile (every step x0.6, so TPOT ~1.67x faster), each in a simulator process of its own. The paired
intervals must hold 1.0 for the twin and exclude it for int8. Then `loadgen compare` gates: a rerun of the same
scenario passes, and the same scenario against the slower profile (baseline where BASE ran int8) is flagged as a
regression.
"""

from __future__ import annotations

import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import orjson

from loadgen.sim.launch import start_sim_process

from .harness import read_report, run_loadgen, write_scenario

# One Locust worker process (plus the master): each variant's users are the same slots of the same worker, so the
# streams and thus the requests match across variants.
_RUN = ("--workers", "1")


def _entry(report: dict[str, Any], variant: str, metric: str, stat: str) -> dict[str, Any]:
    return next(e for e in report["comparison"] if (e["variant"], e["metric"], e["stat"]) == (variant, metric, stat))


def _compare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "compare", *args], capture_output=True, text=True, timeout=120
    )


def test_paired_intervals_hold_one_for_twins_and_exclude_it_for_int8(tmp_path: Path) -> None:
    # One simulator process per variant, as separate GPUs would be: engines sharing one process's event loop are not
    # twins on a busy machine (one run there gave the twin TPOT p50 1.015, 1.006-1.024: the engine stepped second
    # waited behind the first).
    profiles = {"baseline": "baseline", "twin": "baseline", "int8": "int8"}
    with ExitStack() as stack:
        sims = {n: stack.enter_context(start_sim_process([f"{n}={p}"])) for n, p in profiles.items()}
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {n: sim.base_url(n) for n, sim in sims.items()},
            load={"users": 48, "duration": "5s", "warmup": "1s"},
        )
        proc = run_loadgen(scenario, *_RUN)
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    report = read_report(tmp_path / "report")
    method = report["comparison_method"]
    assert method["resamples"] == 1000 and method["confidence"] == 0.95 and method["scenario_seed"] == 7
    assert {(e["variant"], e["metric"], e["stat"]) for e in report["comparison"]} == {
        (v, m, s) for v in ("twin", "int8") for m in ("ttft", "tpot", "e2e") for s in ("p50", "p99")
    }
    for e in report["comparison"]:
        # Every variant replayed the same requests, so every entry is paired, over most of the requests.
        assert e["paired"] is True and e["source"] == "pairs", e
        ok = min(v["overall"]["ok"] for v in report["variants"] if v["name"] in ("baseline", e["variant"]))
        assert 100 <= e["n"] <= ok, e
        if e["stat"] == "p50":
            assert e["ci_low"] <= e["speedup"] <= e["ci_high"], e
        else:  # ~140 pairs: ~1 above the p99, an interval but no verdict
            assert e["tail_n"] < 10 and e["within_noise"] is None and e["ci_low"] is not None, e
    # A 95 % interval may miss 1.0 by design: over 13 runs of this scenario (seeds 7-14 with one simulator process,
    # 7-10 with one per variant) the twin's TTFT p50 interval did twice (0.96-0.99, 1.001-1.039), its TPOT p50 and
    # E2E p50 never: those two are held here. (Of the p99 intervals, on ~1 value above the p99, 3 of 24 missed 1.0:
    # why they get no verdict.)
    for metric in ("tpot", "e2e"):
        twin = _entry(report, "twin", metric, "p50")
        assert twin["within_noise"] is True and twin["ci_low"] <= 1.0 <= twin["ci_high"], twin
    # int8: x0.6 per step, so per output token 1/0.6 = 1.67x faster (batching costs the same on both).
    tpot = _entry(report, "int8", "tpot", "p50")
    assert tpot["within_noise"] is False and tpot["ci_low"] > 1.3, tpot
    assert _entry(report, "int8", "e2e", "p50")["ci_low"] > 1.2
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "## Comparison with confidence intervals" in md
    assert f"TPOT p50 {tpot['speedup']:.2f}× faster (95 % CI {tpot['ci_low']:.2f}–{tpot['ci_high']:.2f}" in md
    assert "**twin** vs baseline:" in md and "TPOT p50 (" in md.split("**twin** vs baseline:")[1].split("\n")[0]


def _run_one(tmp: Path, profile: str) -> Path:
    tmp.mkdir()
    with start_sim_process([f"model={profile}"]) as sim:
        scenario = write_scenario(
            tmp / "s.yaml",
            {"model": sim.base_url("model")},
            load={"users": 6, "duration": "4s", "warmup": "1s"},
            report_dir=str(tmp / "report"),
        )
        proc = run_loadgen(scenario, *_RUN)
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    read_report(tmp / "report")
    return tmp / "report" / "report.json"


def test_compare_passes_a_rerun_and_flags_a_slower_profile(tmp_path: Path) -> None:
    base = _run_one(tmp_path / "base", "int8")
    rerun = _run_one(tmp_path / "rerun", "int8")
    slower = _run_one(tmp_path / "slower", "baseline")
    same = _compare(str(base), str(rerun), "--max-regression", "10%", "--json", str(tmp_path / "same.json"))
    verdicts = orjson.loads((tmp_path / "same.json").read_bytes())
    trusted = not verdicts["untrustworthy"]
    assert same.returncode == (0 if trusted else 3), same.stdout + same.stderr
    assert verdicts["regressions"] == 0, same.stdout
    assert "| model | TPOT p50 (ms) |" in same.stdout
    slow = _compare(str(base), str(slower), "--max-regression", "10%", "--json", str(tmp_path / "slow.json"))
    rows = {r["metric"]: r for r in orjson.loads((tmp_path / "slow.json").read_bytes())["rows"]}
    # baseline's steps cost 1/0.6 of int8's: TPOT ~+67 %, far outside noise; throughput falls.
    assert rows["tpot_p50"]["regression"] is True and rows["tpot_p50"]["ci_low"] > 1.3, rows["tpot_p50"]
    assert rows["e2e_p50"]["regression"] is True
    assert rows["output_tokens_per_s"]["ratio"] < 0.9
    assert "**regression**" in slow.stdout
    assert slow.returncode in (1, 3), slow.stdout + slow.stderr
    if not orjson.loads((tmp_path / "slow.json").read_bytes())["untrustworthy"]:
        assert slow.returncode == 1
    # Missing variant and bad input.
    doc = orjson.loads(slower.read_bytes())
    doc["variants"][0]["name"] = "renamed"
    (tmp_path / "renamed.json").write_bytes(orjson.dumps(doc))
    gone = _compare(str(base), str(tmp_path / "renamed.json"), "--json", str(tmp_path / "gone.json"))
    assert "missing in NEW" in gone.stdout and gone.returncode in (1, 3)
    (tmp_path / "junk.json").write_text("{", encoding="utf-8")
    bad = _compare(str(base), str(tmp_path / "junk.json"))
    assert bad.returncode == 2 and str(tmp_path / "junk.json") in bad.stderr
