"""`loadgen report --format vllm-bench` with raw records: vLLM's per-request lists (`--save-result`'s `latencies`
and `queue_times`, `--save-detailed`'s `input_lens`, `output_lens`, `start_times`, `ttfts`, `itls`, `errors`) read
from the shards, one entry per request sent in the window and ended by the target, in send order; `failed` the
requests sent that failed; without shards (or with shards of other requests) the lists are absent, and the export
says so. The expectations are written out by hand from the records below."""

from __future__ import annotations

import statistics
from array import array
from pathlib import Path

import orjson
import pytest

from loadgen.cli import main
from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report import build_report, write_reports
from loadgen.report.vllm_bench import vllm_bench_results
from loadgen.report.vllm_bench_detail import LIST_KEYS

SCENARIO = """
name: vbd
seed: 5
variants:
  - {name: base, base_url: "http://127.0.0.1:1", model: m1}
  - {name: fast, base_url: "http://127.0.0.1:2", model: m2}
load: {users: 4, arrival: {kind: constant, rate: 10}}
"""


def _rec(rid: str, variant: str, sent: float, gaps: list[float], **kw: object) -> RequestRecord:
    """Sent at `sent` (scheduled 5 ms before), first token 40 ms later, then one-token chunks `gaps` apart."""
    rec = RequestRecord(rid, variant, "chat", scheduled=sent - 0.005, sent=sent)
    times = [sent + 0.04]
    for g in gaps:
        times.append(times[-1] + g)
    rec.chunk_times = array("d", times)
    rec.chunk_tokens = array("l", [1] * len(times))
    rec.done = times[-1]
    rec.prompt_tokens, rec.prompt_tokens_target, rec.output_tokens = 50, 48, len(times)
    for k, v in kw.items():
        setattr(rec, k, v)
    return rec


def _records() -> list[RequestRecord]:
    recs = [_rec(f"base-{i}", "base", 100.0 + i, [0.02, 0.02]) for i in range(3)]
    recs += [
        # Listed, in send order (not id order): ok, ok, failed mid-stream, failed before any token, ok.
        _rec("fast-b", "fast", 101.5, [0.01, 0.03]),
        _rec("fast-a", "fast", 100.5, [0.02]),
        _rec(
            "fast-c", "fast", 102.5, [0.05], error=ErrorKind.STREAM_INTERRUPTED, output_tokens=None, prompt_tokens=None
        ),
        _rec("fast-d", "fast", 103.5, [], error=ErrorKind.CONNECT, error_detail="refused", prompt_tokens=None),
        _rec("fast-e", "fast", 104.5, [0.04, 0.02, 0.06]),
        # Not listed: sent in the warm-up, cut at the stop, given up by the client (one chunk each: no gaps).
        _rec("fast-w", "fast", 99.0, [], warmup=True),
        _rec("fast-x", "fast", 105.5, [], cut_by_stop=True),
        _rec("fast-y", "fast", 105.6, [], cancelled=True),
    ]
    recs[6].chunk_times, recs[6].chunk_tokens, recs[6].done = array("d"), array("l"), 103.51  # no token came
    return recs


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, Path]:
    """(the report, its folder, the raw shards' folder): 2 arrivals of `fast` were never sent."""
    tmp = tmp_path_factory.mktemp("vbd")
    agg = Aggregate()
    recs = _records()
    for rec in recs:
        agg.add(rec, 0.0)
    g = agg.group("fast", "chat")
    g.add_not_sent()
    g.add_not_sent()
    raw = tmp / "raw"
    raw.mkdir()
    rows = [orjson.dumps(r.to_json()) for r in recs]
    (raw / "records-r1-w0-1.jsonl").write_bytes(b"\n".join(rows[:5]) + b"\n")
    (raw / "records-r1-w1-2.jsonl").write_bytes(b"\n".join(rows[5:]) + b"\n")
    run = {"workers": {"worker-0": {}}, "untrustworthy_reasons": [], "users_per_variant": {"base": 2, "fast": 2}}
    report = build_report(parse_scenario(SCENARIO), agg, 10.0, run)
    write_reports(report, tmp / "report")
    return report, tmp / "report", raw


def _export(report_dir: Path, out: Path, *args: str) -> list[dict]:
    code = main(["report", str(report_dir), "--format", "vllm-bench", "--out", str(out), "--exit-zero", *args])
    assert code == 0
    return [orjson.loads(line) for line in out.read_text().splitlines()]


def test_the_lists_come_from_the_raw_records_in_send_order(run: tuple[dict, Path, Path], tmp_path: Path) -> None:
    _, report_dir, raw = run
    base, fast = _export(report_dir, tmp_path / "v.jsonl", "--raw-records", str(raw))
    # Sent and failed: 2 (the mid-stream failure and the refused connection); never sent, cut, cancelled: apart.
    assert (fast["completed"], fast["failed"]) == (3, 2)
    assert fast["loadgen_counted_apart"] == {"not_sent": 2, "cut_by_stop": 1, "cancelled": 1}
    assert fast["start_times"] == [100.5, 101.5, 102.5, 103.5, 104.5]
    assert fast["input_lens"] == [50, 50, 48, 48, 50]  # the server's count, else what was asked for
    assert fast["output_lens"] == [2, 3, 0, 0, 4]  # a failure's is 0, as vLLM's
    assert fast["ttfts"] == [0.04, 0.04, 0.04, 0.0, 0.04]  # 0.0: no first token
    assert fast["itls"] == [[0.02], [0.01, 0.03], [0.05], [], [0.04, 0.02, 0.06]]
    assert fast["latencies"] == [0.06, 0.08, 0.0, 0.0, 0.16]
    assert fast["queue_times"] == [0.005] * 5
    assert fast["errors"] == ["", "", "stream_interrupted", "connect: refused", ""]
    note = fast["loadgen_per_request"]
    assert note["written"] == [k for k in LIST_KEYS if k != "generated_texts"] and "generated_texts" not in fast
    assert note["absent"] == {"generated_texts": "raw records keep no reply text"} and "5 requests" in note["source"]
    assert base["ttfts"] == [0.04] * 3 and base["itls"] == [[0.02, 0.02]] * 3 and base["failed"] == 0


def test_std_itl_is_the_population_std_of_the_chunk_gaps(run: tuple[dict, Path, Path]) -> None:
    report, _, _ = run
    fast = vllm_bench_results(report)[1]
    gaps = [0.02, 0.01, 0.03, 0.05, 0.04, 0.02, 0.06]  # every listed request's (the failures' gaps are real gaps)
    assert fast["std_itl_ms"] == pytest.approx(1e3 * statistics.pstdev(gaps), rel=5e-3)
    assert fast["mean_itl_ms"] == pytest.approx(1e3 * statistics.fmean(gaps), rel=2e-3)
    # A report written before it kept an ICL histogram: the std from the raw records' gaps, else null.
    old = orjson.loads(orjson.dumps(report))
    for v in old["variants"]:
        del v["overall"]["hdr"]["icl"]
    rows = [r.to_json() for r in _records()]
    assert vllm_bench_results(old)[1]["std_itl_ms"] is None
    assert vllm_bench_results(old, rows)[1]["std_itl_ms"] == pytest.approx(1e3 * statistics.pstdev(gaps), abs=1e-3)


def test_without_raw_records_the_lists_are_said_to_be_absent(run: tuple[dict, Path, Path], tmp_path: Path) -> None:
    _, report_dir, _ = run
    for r in _export(report_dir, tmp_path / "v.jsonl"):
        assert not set(LIST_KEYS) & set(r)
        note = r["loadgen_per_request"]
        assert note["source"] is None and note["written"] == [] and set(note["absent"]) == set(LIST_KEYS)
        assert all("no raw records given" in why for why in note["absent"].values())
        assert "per-request lists from raw records only" in r["loadgen_note"]


def test_shards_of_other_requests_are_not_listed(run: tuple[dict, Path, Path], tmp_path: Path) -> None:
    _, report_dir, raw = run
    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "records-r1-w0-1.jsonl").write_bytes((raw / "records-r1-w0-1.jsonl").read_bytes())  # a lost worker
    base, fast = _export(report_dir, tmp_path / "v.jsonl", "--raw-records", str(partial))
    assert "ttfts" in base  # all of base's rows are in that shard
    assert "ttfts" not in fast
    why = fast["loadgen_per_request"]["absent"]["ttfts"]
    assert "hold 2 requests of fast" in why and "the report 5" in why


def test_shards_under_the_report_folder_are_found(run: tuple[dict, Path, Path], tmp_path: Path) -> None:
    report, _, raw = run
    folder = tmp_path / "r"
    write_reports(report, folder)
    (folder / "raw").mkdir()
    for shard in raw.iterdir():
        (folder / "raw" / shard.name).write_bytes(shard.read_bytes())
    fast = _export(folder, tmp_path / "v.jsonl")[1]
    assert fast["ttfts"] == [0.04, 0.04, 0.04, 0.0, 0.04]


def test_a_report_rebuilt_from_the_shards_lists_them(run: tuple[dict, Path, Path], tmp_path: Path) -> None:
    _, _, raw = run
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    out = tmp_path / "v.jsonl"
    args = ["report", str(raw), "--format", "vllm-bench", "--scenario", str(scenario), "--out", str(out)]
    assert main([*args, "--exit-zero"]) == 0
    fast = [orjson.loads(line) for line in out.read_text().splitlines()][1]
    # The rows hold no arrival that was never sent: the rebuilt report counts none, and lists the same requests.
    assert (fast["completed"], fast["failed"], fast["loadgen_counted_apart"]["not_sent"]) == (3, 2, 0)
    assert fast["ttfts"] == [0.04, 0.04, 0.04, 0.0, 0.04] and fast["start_times"][0] == 100.5
