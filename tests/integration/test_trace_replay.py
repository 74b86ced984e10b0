"""A production trace replayed against the simulator, checked against its truth log: the shipped 200-row
Mooncake-format sample at time_scale 1, to one engine without prefix caching and one with.

- Arrivals: request k is row k, scheduled at the row's offset exactly and sent within the schedule's slip; the
  simulator saw it arrive that late at most (its own clock, the same monotonic clock).
- Lengths: the server's usage counts the row's input length (exact without a tokenizer: one word, one simulated
  token) and its output length.
- Shared blocks: the prefix-caching engine's cache held, when it admitted each request, exactly the blocks the
  trace says an earlier row had sent (k·512 tokens); the other engine none.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from loadgen.config.scenario import load_scenario
from loadgen.sim.launch import start_sim_process
from loadgen.sim.truth import load_truth
from loadgen.traffic.sampler import sampler_for
from loadgen.traffic.trace_file import trace_of

from .harness import read_records, read_report, run_loadgen, write_scenario

SAMPLE = Path(str(resources.files("loadgen") / "examples" / "traces" / "mooncake-sample.jsonl"))
# Generous for two shared cores late in a CI run: the schedule is judged exact (scheduled), the sends by this.
_SLIP_P99_S = 0.05


def _p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.99 * len(s)))]


def test_a_mooncake_trace_is_sent_on_its_times_with_its_lengths_and_shared_prefixes(tmp_path: Path) -> None:
    truth_path = tmp_path / "truth.jsonl"
    with start_sim_process(["baseline", "prefix-cache"], truth_log=truth_path) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"baseline": sim.base_url("baseline"), "prefix-cache": sim.base_url("prefix-cache")},
            traffic={"trace": {"path": str(SAMPLE)}, "mixes": [{"name": "trace"}], "custom_mixes": {}},
            # Senders to spare: without prefix caching the 3.5k-token conversations take up to ~6 s here, so at ~10
            # req/s some 60 are in flight at once; with too few senders the sends would queue (queue_delay), which
            # is the client's lag, not the schedule's (tests/integration/test_edges_verdict.py judges that case).
            load={"users": 320, "spawn_rate": 1000, "duration": "21s"},
            slos=[{"metric": "success_rate", "min_percent": 100}],
            run_trust={"loop_lag_p99_ms": 200, "schedule_slip_p99_ms": 50},
        )
        proc = run_loadgen(scenario, "--workers", "1", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = read_report(tmp_path / "report")
    sc = load_scenario(scenario)
    assert sc.traffic.trace is not None
    rows = trace_of(sc.traffic.trace).rows
    specs = [sampler_for(sc, 0).spec_at(k) for k in range(len(rows))]
    records = read_records(tmp_path / "raw")
    for variant in ("baseline", "prefix-cache"):
        v = next(x for x in report["variants"] if x["name"] == variant)
        o = v["open_loop"]
        assert o["kind"] == "trace" and o["arrivals"] == o["sent"] == 200, o
        assert o["trace"]["rows_in_window"] == 200 and o["trace"]["format"] == "mooncake"
        assert v["overall"]["requests"] == v["overall"]["ok"] == 200
        truth = load_truth(truth_path, variant=variant)
        mine = {int(r["id"].rsplit("-", 1)[1]): r for r in records if r["variant"] == variant}
        assert sorted(mine) == list(range(200))
        origin = mine[0]["scheduled"] - rows[0].offset
        slips, late = [], []
        for k, r in mine.items():
            row, t = rows[k], truth[r["id"]]
            assert r["error"] is None and not r["cut_by_stop"]
            # The schedule is the trace's offsets exactly; the send and the server's arrival lag it by the slip.
            assert abs(r["scheduled"] - origin - row.offset) < 1e-6, (k, r["scheduled"] - origin, row.offset)
            slips.append(r["sent"] - r["scheduled"])
            assert t.arrival is not None
            late.append(t.arrival - r["scheduled"])
            assert r["prompt_tokens"] == row.input_tokens and r["output_tokens"] == row.output_tokens, k
            expected = specs[k].shared_prefix_tokens if variant == "prefix-cache" else 0
            assert t.cached_tokens == expected, (variant, k, t.cached_tokens, expected)
        print(f"{variant}: send slip p99 {_p99(slips) * 1e3:.2f} ms, server arrival lag p99 {_p99(late) * 1e3:.2f} ms")
        assert min(slips) >= 0 and _p99(slips) < _SLIP_P99_S
        assert min(late) >= 0 and _p99(late) < _SLIP_P99_S + 0.05
    md = (tmp_path / "report" / "report.md").read_text(encoding="utf-8")
    assert "Trace: mooncake, 200 of its 200 rows (from 0 s of trace time, time_scale 1: 19.25 s)" in md
    # What the blocks predict is a real share of the prompt tokens: the cache had something to do.
    shared = sum(s.shared_prefix_tokens for s in specs)
    assert shared > 0.4 * sum(r.input_tokens for r in rows)
