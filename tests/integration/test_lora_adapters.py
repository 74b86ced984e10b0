"""LoRA adapters end to end against the simulator's truth log: one simulator, one short run.

Two variants serve adapter-0 and adapter-1 beside their base model, loading one costs 250 ms; `x` holds one adapter
at a time (`max_loras: 1`, a swap loads again), `y` two. One user per variant sends requests one after another over
adapter-0, adapter-1 and the base model (each variant's own `model`). Then:

- every request names the model its record says, and the truth log shows the simulator ran it on that model;
- the same request (stream, index) names the same adapter in both variants, though their base models differ;
- the loads the truth log shows are exactly those the LRU predicts from the order the requests were sent in (`y`:
  the first request of each adapter; `x`: each request whose adapter is not the last one loaded), and they are the
  slow first tokens: a request that paid a load has a TTFT of at least the load time, every other one well below
  half of it;
- the report's per-adapter counts are the raw records'.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth

from .harness import read_records, read_report, run_loadgen, write_scenario

LOAD_MS = 250.0
ADAPTERS = ["adapter-0", "adapter-1"]


def _key(rid: str) -> tuple[int, int]:
    """(stream, index) of a request id `{worker}-{variant}-{stream}-{index}`."""
    _, stream, index = rid.rsplit("-", 2)
    return int(stream), int(index)


def test_each_request_runs_on_its_adapter_and_loads_show_as_its_ttft(tmp_path: Path) -> None:
    lora = {"lora_adapters": "2", "lora_load_ms": str(LOAD_MS)}
    changes = {"x": {**lora, "max_loras": "1"}, "y": {**lora, "max_loras": "2"}}
    truth_path = tmp_path / "truth.jsonl"
    with start_sim_process(["x=baseline", "y=baseline"], truth_log=truth_path, profile_changes=changes) as sim:
        variants = {
            name: {
                "base_url": sim.base_url(name),
                "model": name,  # the simulator's base model is its variant's name
                "adapters": [{"name": a} for a in ADAPTERS] + [{"name": name}],
            }
            for name in ("x", "y")
        }
        scenario = write_scenario(
            tmp_path / "s.yaml",
            variants,
            traffic={
                "custom_mixes": {
                    "short": {
                        "buckets": [{"name": "s", "prompt_tokens": [30, 60], "weight": 1}],
                        "output_tokens": [2, 4],
                    }
                }
            },
            load={"users": 2, "duration": "4s", "warmup": 0},
            slos=[],
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"), timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = read_records(tmp_path / "raw")
    report = read_report(tmp_path / "report")
    done = [r for r in rows if r["error"] is None and not r["cut_by_stop"]]
    assert all(r["error"] is None for r in rows), {r["error"] for r in rows}

    by_variant: dict[str, list[dict[str, Any]]] = {"x": [], "y": []}
    for r in sorted(done, key=lambda r: r["sent"]):
        by_variant[r["variant"]].append(r)
    loaded_ttft, other_ttft = [], []
    for name, recs in by_variant.items():
        truth = load_truth(truth_path, variant=name)
        assert len(recs) >= 12, (name, len(recs))
        assert {r["adapter"] for r in recs} == {*ADAPTERS, name}, name
        held: list[str] = []  # the loaded adapters, least recently used first
        capacity = 1 if name == "x" else 2
        for r in recs:
            t = truth[r["id"]]
            assert t.model == r["adapter"], (r["id"], t.model, r["adapter"])
            predicted = False
            if r["adapter"] != name:  # the base model takes no slot
                if r["adapter"] in held:
                    held.remove(r["adapter"])
                else:
                    predicted = True
                    held = held[-(capacity - 1) :] if capacity > 1 else []
                held.append(r["adapter"])
            assert t.lora_load == predicted, (name, r["id"], r["adapter"], t.lora_load)
            (loaded_ttft if t.lora_load else other_ttft).append(r["ttft"] * 1e3)
            if t.lora_load:
                assert r["ttft"] * 1e3 >= LOAD_MS, (r["id"], r["ttft"])
            else:
                assert r["ttft"] * 1e3 < LOAD_MS / 2, (r["id"], r["ttft"])
        loads = sum(truth[r["id"]].lora_load for r in recs)
        assert loads == 2 if name == "y" else loads >= 3, (name, loads)
        # The report's per-adapter counts are the records' (warm-up 0: every record is in the window).
        counted = [r for r in rows if r["variant"] == name and not r["cut_by_stop"]]
        entry = next(v for v in report["variants"] if v["name"] == name)
        assert {a: g["requests"] for a, g in entry["adapters"].items()} == {
            a: sum(r["adapter"] == a for r in counted) for a in (*ADAPTERS, name)
        }
        assert entry["adapters"][name]["base"] and not entry["adapters"]["adapter-0"]["base"]

    # Paired: the same request names the same adapter in both variants (each one's base counts as the base).
    x = {_key(r["id"]): r["adapter"].replace("x", "base") for r in rows if r["variant"] == "x"}
    y = {_key(r["id"]): r["adapter"].replace("y", "base") for r in rows if r["variant"] == "y"}
    common = set(x) & set(y)
    assert len(common) >= 12 and all(x[k] == y[k] for k in common)
    print(
        f"TTFT ms: {len(loaded_ttft)} requests that loaded their adapter, median "
        f"{statistics.median(loaded_ttft):.1f} (min {min(loaded_ttft):.1f}); {len(other_ttft)} others, median "
        f"{statistics.median(other_ttft):.1f} (max {max(other_ttft):.1f})"
    )
