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
from statistics import median
from typing import Any

import orjson

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import TruthRequest, load_truth

from .harness import read_records, read_report, run_loadgen, write_scenario

# One Locust worker process (plus the master): each variant's users are the same slots of the same worker, so the
# streams and thus the requests match across variants.
_RUN = ("--workers", "1")


def _entry(report: dict[str, Any], variant: str, metric: str, stat: str) -> dict[str, Any]:
    return next(e for e in report["comparison"] if (e["variant"], e["metric"], e["stat"]) == (variant, metric, stat))


def _compare(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "compare", *args], capture_output=True, text=True, timeout=120
    )


def _served_ratio(
    records: list[dict[str, Any]], truths: dict[str, dict[str, TruthRequest]], variant: str
) -> dict[str, float]:
    """The ratio the simulators actually served, by the report's rule (baseline p50 over the variant's, over the
    requests both completed in the window), from the servers' own clocks: E2E = finish - arrival, TPOT = first to
    last token over the tokens after the first."""

    def served(v: str) -> dict[str, tuple[float, float]]:
        out = {}
        for r in records:
            if r["variant"] != v or r["error"] is not None or r["warmup"] or r["cut_by_stop"]:
                continue
            t = truths[v][r["id"]]
            assert t.arrival is not None and t.finish is not None and t.output_tokens > 1, r["id"]
            tpot = (t.chunk_times[-1] - t.chunk_times[0]) / (t.output_tokens - 1)
            out[r["id"].rsplit("-", 2)[1] + "-" + r["id"].rsplit("-", 2)[2]] = (t.finish - t.arrival, tpot)
        return out

    base, var = served("baseline"), served(variant)
    keys = sorted(base.keys() & var.keys())
    assert len(keys) >= 100, len(keys)
    return {
        metric: median(base[k][i] for k in keys) / median(var[k][i] for k in keys)
        for i, metric in enumerate(("e2e", "tpot"))
    }


def test_paired_intervals_read_twins_equal_and_exclude_one_for_int8(tmp_path: Path) -> None:
    # One simulator process per variant, as separate GPUs would be: engines sharing one process's event loop are not
    # twins on a busy machine (one run there gave the twin TPOT p50 1.015, 1.006-1.024: the engine stepped second
    # waited behind the first).
    profiles = {"baseline": "baseline", "twin": "baseline", "int8": "int8"}
    with ExitStack() as stack:
        sims = {
            n: stack.enter_context(start_sim_process([f"{n}={p}"], truth_log=tmp_path / f"truth-{n}.jsonl"))
            for n, p in profiles.items()
        }
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {n: sim.base_url(n) for n, sim in sims.items()},
            load={"users": 48, "duration": "5s", "warmup": "1s"},
        )
        proc = run_loadgen(scenario, *_RUN, "--raw-records", str(tmp_path / "raw"))
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
    # Whether a 95 % interval covers the true ratio 95 % of the time is judged on synthetic replications with a known
    # ratio (tests/unit/test_bootstrap.py). Here the twins' true ratio is 1.0 only up to the machine: three simulator
    # processes and loadgen share two cores, and one twin's process can lag the other for a stretch of the run (fresh-
    # clone CIs read the twin's E2E p50 at 0.969 and an interval ending at 1.049). So the ground truth is what the
    # simulators served, by their own clocks: loadgen's speedup must read it within 1 % - for the twins and for int8.
    records = read_records(tmp_path / "raw")
    truths = {n: load_truth(tmp_path / f"truth-{n}.jsonl", variant=n) for n in profiles}
    for variant in ("twin", "int8"):
        served = _served_ratio(records, truths, variant)
        for metric in ("tpot", "e2e"):
            e = _entry(report, variant, metric, "p50")
            assert abs(e["speedup"] / served[metric] - 1.0) < 0.01, (e, served)
    # The machine's lag is a few percent, never the 1.67x of int8's x0.6 per step (batching costs the same on both).
    for metric in ("tpot", "e2e"):
        twin = _entry(report, "twin", metric, "p50")
        assert 0.9 < twin["ci_low"] <= twin["ci_high"] < 1.1, twin
    tpot = _entry(report, "int8", "tpot", "p50")
    assert tpot["within_noise"] is False and tpot["ci_low"] > 1.3, tpot
    assert _entry(report, "int8", "e2e", "p50")["ci_low"] > 1.2
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "## Comparison with confidence intervals" in md
    assert f"TPOT p50 {tpot['speedup']:.2f}× faster (95 % CI {tpot['ci_low']:.2f}–{tpot['ci_high']:.2f}" in md
    # The twin's line says what its JSON says: TPOT within noise, or (a lag the narrow interval resolves, seen
    # 1.0017, 1.0001-1.0038) a speedup with its interval.
    twin_line = md.split("**twin** vs baseline:")[1].split("\n")[0]
    twin_tpot = _entry(report, "twin", "tpot", "p50")
    if twin_tpot["within_noise"]:
        assert "Within noise:" in twin_line and "TPOT p50 (" in twin_line, twin_line
    else:
        assert f"TPOT p50 {twin_tpot['speedup']:.2f}× " in twin_line, twin_line


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
