"""loadgen's timings against the simulator's ground truth (the time it wrote every chunk), at concurrency 16+.

Tolerances: per request, TTFT and per-token ITL errors have median |error| ≤ 0.2 ms and p99 ≤ 1 ms (issue #2 asked
for 1 ms / 5 ms; chunk times are the kernel's receive stamps, measured here at ~0.005 / 0.03 ms from the clock read
before each write, 0 outside each write's own interval — harness.compare_with_truth —, so a reader that stamped in user
space again — 0.2 / 1.5 ms on this machine — would fail, as would a loop stalled at the stop while the drain streams).
"""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import compare_with_truth, quantile, read_records, read_report, run_loadgen, write_scenario


@pytest.fixture(scope="module")
def accuracy_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    tmp = tmp_path_factory.mktemp("accuracy")
    truth_path = tmp / "truth.jsonl"
    with start_sim_process(["baseline", "spec-decode"], truth_log=truth_path) as sim:
        scenario = write_scenario(
            tmp / "scenario.yaml",
            {"baseline": sim.base_url("baseline"), "spec-decode": sim.base_url("spec-decode")},
            load={"users": 24, "duration": "8s"},
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {
        "records": read_records(tmp / "raw"),
        "truth_base": load_truth(truth_path, variant="baseline"),
        "truth_spec": load_truth(truth_path, variant="spec-decode"),
        "report": read_report(tmp / "report"),
    }


def _errors(run: dict[str, object], variant: str) -> dict[str, list[float]]:
    records = [r for r in run["records"] if r["variant"] == variant]  # type: ignore[attr-defined]
    truth = run["truth_base" if variant == "baseline" else "truth_spec"]
    assert len(records) >= 30
    return compare_with_truth(records, truth)  # type: ignore[arg-type]


@pytest.mark.parametrize("variant", ["baseline", "spec-decode"])
def test_ttft_and_per_token_itl_match_ground_truth(accuracy_run: dict[str, object], variant: str) -> None:
    errs = _errors(accuracy_run, variant)
    for metric in ("ttft", "itl"):
        abs_err = [abs(e) for e in errs[metric]]
        med, p99 = quantile(abs_err, 0.5), quantile(abs_err, 0.99)
        print(f"{variant} {metric}: n={len(abs_err)} median |err| {med * 1e3:.3f} ms, p99 {p99 * 1e3:.3f} ms")
        assert med <= 0.0002, (metric, med)
        assert p99 <= 0.001, (metric, p99)
    # A client timestamp can never precede the server's write of the same bytes.
    assert min(errs["ttft"]) > -0.0005


def test_spec_decode_chunks_carry_several_tokens_and_itl_is_per_token(accuracy_run: dict[str, object]) -> None:
    rows: list[dict[str, Any]] = accuracy_run["records"]  # type: ignore[assignment]
    records = [r for r in rows if r["variant"] == "spec-decode" and r["error"] is None and not r["cut_by_stop"]]
    multi = sum(1 for r in records for k in r["chunk_tokens"] if k > 1)
    assert multi > 100, "spec-decode must put several tokens in many chunks"
    report = accuracy_run["report"]
    spec = next(v for v in report["variants"] if v["name"] == "spec-decode")  # type: ignore[index]
    base = next(v for v in report["variants"] if v["name"] == "baseline")  # type: ignore[index]
    itl, icl = spec["overall"]["metrics_ms"]["itl"], spec["overall"]["metrics_ms"]["icl"]
    # Mean ITL per token × tokens per chunk ≈ mean ICL: per-token samples are chunk gaps divided by k.
    tokens = sum(sum(r["chunk_tokens"][1:]) for r in records)
    gaps = sum(len(r["chunk_tokens"]) - 1 for r in records)
    assert itl["mean"] * tokens / gaps == pytest.approx(icl["mean"], rel=0.02)
    assert spec["overall"]["metrics_ms"]["tpot"]["p50"] < base["overall"]["metrics_ms"]["tpot"]["p50"]
    assert all(s == ["server"] for s in [list(spec["overall"]["token_count_source"])])


def test_report_counts_equal_raw_records(accuracy_run: dict[str, object]) -> None:
    report = accuracy_run["report"]
    records = accuracy_run["records"]
    for v in report["variants"]:  # type: ignore[index]
        n = sum(1 for r in records if r["variant"] == v["name"])  # type: ignore[attr-defined]
        o = v["overall"]
        assert o["requests"] + o["warmup_excluded"] + o["cut_by_stop"] == n
