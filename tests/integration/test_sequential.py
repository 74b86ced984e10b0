"""Sequential variants end to end (`load.sequential: true`): each variant runs alone, one after another with the
pause between them, on the same seeded requests, and one report holds them all with each variant's own window."""

from __future__ import annotations

from pathlib import Path

from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, run_loadgen, write_scenario


def test_variants_run_one_after_another_into_one_report(tmp_path: Path) -> None:
    pause = 1.0
    with start_sim_process(["slow=baseline", "fast=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"slow": sim.base_url("slow"), "fast": sim.base_url("fast")},
            load={"users": 4, "duration": "3s", "sequential": True, "sequential_pause": f"{pause:g}s"},
            slos=[
                {"metric": "ttft", "stat": "p50", "max_ms": 60_000},
                {"metric": "e2e", "stat": "p99", "max_ms": 60_000, "variant": "fast"},
            ],
            metrics={"server_scrape_interval": "1s"},
        )
        proc = run_loadgen(scenario, "--workers", "1", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sequential: variant 'slow' (1 of 2)" in proc.stderr and "pausing 1s before variant 'fast'" in proc.stderr
    report = read_report(tmp_path / "report")
    run = report["run"]
    assert run["sequential"] is True and [p["variant"] for p in run["phases"]] == ["slow", "fast"]
    assert all(p["exit_code"] == 0 and 2.5 < p["window_s"] < 3.5 for p in run["phases"])
    assert set(run["workers"]) == {"slow/worker-0", "fast/worker-0"}
    names = [v["name"] for v in report["variants"]]
    assert names == ["slow", "fast"]
    for v in report["variants"]:
        phase = next(p for p in run["phases"] if p["variant"] == v["name"])
        assert v["window_s"] == phase["window_s"]
        g = v["overall"]
        # Rates over the variant's own window, not the whole run's.
        assert g["requests_per_s"] == round((g["ok"] - g["drained"]) / phase["window_s"], 4)  # the drain is outside
        assert g["requests"] > 10 and g["ok"] == g["requests"]
    # Every SLO was evaluated on the whole scenario: the unnamed one for both, the named one for its variant.
    assert sorted((s["variant"], s["metric"]) for s in report["slos"]) == [
        ("fast", "e2e"),
        ("fast", "ttft"),
        ("slow", "ttft"),
    ]
    slow, fast = (next(v for v in report["variants"] if v["name"] == n) for n in ("slow", "fast"))
    # Each variant's own /metrics, scraped by its phase's master, survive into the one report, in phase order.
    assert slow["server_metrics"]["samples"] >= 2 and fast["server_metrics"]["samples"] >= 2
    assert max(slow["server_metrics"]["t_unix_s"]) < min(fast["server_metrics"]["t_unix_s"])
    assert fast["overall"]["metrics_ms"]["tpot"]["p50"] < slow["overall"]["metrics_ms"]["tpot"]["p50"]
    assert (tmp_path / "report" / "report.md").exists() and (tmp_path / "report" / "aggregate.json").exists()
    rows = read_records(tmp_path / "raw" / "slow") + read_records(tmp_path / "raw" / "fast")
    by_variant = {n: [r for r in rows if r["variant"] == n] for n in ("slow", "fast")}
    # One after another: the fast variant's first request went out after the slow one's last ended + the pause.
    assert min(r["sent"] for r in by_variant["fast"]) > max(r["done"] for r in by_variant["slow"]) + pause * 0.9
    # Paired: the k-th request of each user's stream is the same request in both phases (id: …-stream-index).
    lengths = {
        n: {tuple(r["id"].rsplit("-", 2)[1:]): (r["prompt_tokens_target"], r["max_tokens"]) for r in rs}
        for n, rs in by_variant.items()
    }
    common = set(lengths["slow"]) & set(lengths["fast"])
    assert len(common) > 10
    assert all(lengths["slow"][k] == lengths["fast"][k] for k in common)
