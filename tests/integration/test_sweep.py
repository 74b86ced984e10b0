"""`loadgen sweep` on the simulator: each variant loaded alone at increasing open-loop rates; the knees rank the
variants in the order of their profiles' speed (int8 costs x0.6 of baseline per step) and the curves are written.

Outputs of 100–150 tokens take baseline ~1.4–2 s end to end and int8 ~0.8–1.2 s, so an E2E p99 SLO of 1.8 s
leaves baseline passing only at the lowest rate and int8 at all three."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from loadgen.sim.launch import start_sim_process

from .harness import write_scenario

RATES = (10.0, 20.0, 40.0)


def test_sweep_ranks_the_knees_by_profile_speed_and_writes_the_curves(tmp_path: Path) -> None:
    with start_sim_process(["baseline=baseline", "int8=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"baseline": sim.base_url("baseline"), "int8": sim.base_url("int8")},
            traffic={
                "mixes": [{"name": "m", "weight": 1}],
                "custom_mixes": {
                    "m": {
                        "buckets": [{"name": "s", "prompt_tokens": [100, 300], "weight": 1}],
                        "output_tokens": [100, 150],
                    }
                },
            },
            # Open loop: a user per request in flight. Baseline at 40 req/s × E2E up to ~2.3 s holds ~90 at once; with
            # 64 users the arrivals that found none free were dropped and the step was (rightly) judged saturated.
            load={"users": 128, "spawn_rate": 1000, "duration": "60s", "warmup": "0.5s"},
            # The knees, not the generator's trust, are under test here: on 2 cores shared with the simulator, a 40
            # req/s step of ~90 streams has measured schedule slip p99 of 5–7 ms against the default 5 ms limit, and a
            # fresh-clone CI (late in the suite) judged a 20 req/s step untrustworthy at 25 ms. E2E runs ~1.5 s here.
            run_trust={"schedule_slip_p99_ms": 100, "loop_lag_p99_ms": 200},
            slos=[
                {"metric": "e2e", "stat": "p99", "max_ms": 1800},
                {"metric": "queue_delay", "stat": "p99", "max_ms": 200},  # open-loop SLO: the sweep sets arrival
                {"metric": "success_rate", "min_percent": 99},
            ],
        )
        out = tmp_path / "sweep"
        rates = ",".join(f"{r:g}" for r in RATES)
        proc = subprocess.run(
            [sys.executable, "-m", "loadgen.cli", "sweep", str(scenario), "--rates", rates, "--step-duration", "3s"]
            + ["--workers", "0", "--report-dir", str(out)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    print(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = orjson.loads((out / "sweep.json").read_bytes())
    assert (out / "sweep.md").read_text(encoding="utf-8") in proc.stdout
    # sweep.html: the same curves, self-contained (its chart data embedded, no external script).
    page = (out / "sweep.html").read_text(encoding="utf-8")
    assert "<script src=" not in page and '"charts"' in page and "knee" in page
    assert f"Open in a browser: {(out / 'sweep.html').resolve().as_uri()}" in proc.stdout
    knees = {v["name"]: v["knee_rate_per_s"] for v in doc["variants"]}
    print("knees:", knees)
    assert knees["baseline"] is not None and knees["int8"] is not None
    assert knees["int8"] >= knees["baseline"]
    for v in doc["variants"]:
        steps = v["steps"]
        assert [s["requested_rate_per_s"] for s in steps] == list(RATES[: len(steps)])
        for s in steps:
            assert Path(s["report"]).exists() and s["trustworthy"]
            assert s["output_tokens_per_s"] > 0 and s["success_rate"] == 1.0
            assert all(isinstance(s[f"{m}_{p}_ms"], float) for m in ("ttft", "itl", "e2e") for p in ("p50", "p99"))
            step = (Path(s["report"]).parent / "scenario.yaml").read_text(encoding="utf-8")
            assert f"rate: {s['requested_rate_per_s']}" in step and "duration: 3s" in step
            assert v["name"] in step and ({"baseline", "int8"} - {v["name"]}).pop() not in step  # that variant alone
        # the curve climbs: more load, more throughput, and end-to-end latency that does not fall
        tput = [s["output_tokens_per_s"] for s in steps]
        assert tput == sorted(tput)
    base = next(v for v in doc["variants"] if v["name"] == "baseline")["steps"]
    fast = next(v for v in doc["variants"] if v["name"] == "int8")["steps"]
    for b, f in zip(base, fast, strict=False):  # at every rate both ran, int8 answers sooner
        assert f["e2e_p50_ms"] < b["e2e_p50_ms"]
