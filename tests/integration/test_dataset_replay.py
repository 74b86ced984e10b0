"""Dataset replay against the simulator: `loadgen run` sends the dataset's rows, not synthetic prompts.

The test writes a JSONL of simple and chat rows whose prompt lengths are all different, so a record's prompt length
names its row: each record's `max_tokens` is that row's `output_tokens`, the prompt tokens the simulator counted
(usage) are the row's words, the k-th user of each variant sends the same rows in the same order (paired), and
the report's only mix is the dataset's.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from loadgen.sim.launch import start_sim_process

from .harness import read_records, read_report, run_loadgen, write_scenario


def _dataset(path: Path) -> dict[int, int]:
    """Rows of 6..45 words; returns the output tokens of each row, by its prompt length in words."""
    expected: dict[int, int] = {}
    lines = []
    for k in range(40):
        words = [f"row{k}"] + ["lorem"] * (k + 5)
        out = 4 + (k * 7) % 23
        if k % 2:
            # A chat row: a system message, then the user's turn (the system's 2 words count toward its length).
            row: dict[str, object] = {
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": " ".join(words[:-2])},
                ],
                "output_tokens": out,
            }
        else:
            row = {"prompt": " ".join(words), "output_tokens": out, "id": k}
        expected[len(words)] = out
        lines.append(json.dumps(row))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return expected


def test_a_run_replays_the_dataset_rows(tmp_path: Path) -> None:
    expected = _dataset(tmp_path / "rows.jsonl")
    with start_sim_process(["a=int8", "b=int8"]) as sim:
        scenario = write_scenario(
            tmp_path / "s.yaml",
            {"a": sim.base_url("a"), "b": sim.base_url("b")},
            traffic={"mixes": [{"name": "dataset"}], "dataset": {"path": str(tmp_path / "rows.jsonl")}},
            load={"users": 4, "duration": "3s"},
        )
        proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(tmp_path / "raw"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = read_records(tmp_path / "raw")
    assert len(records) > 40
    by_request: dict[tuple[str, str], dict[str, int]] = defaultdict(dict)
    for r in records:
        assert (r["mix"], r["bucket"]) == ("dataset", "short")
        assert r["prompt_tokens_target"] in expected
        assert r["max_tokens"] == expected[r["prompt_tokens_target"]]
        if r["error"] is None and not r["cut_by_stop"]:
            assert r["prompt_tokens"] == r["prompt_tokens_target"]  # the simulator counts the words it was sent
            assert 1 <= r["output_tokens"] <= r["max_tokens"]
        _tag, variant, stream, index = r["id"].rsplit("-", 3)
        by_request[(stream, index)][variant] = r["prompt_tokens_target"]
    both = [rows for rows in by_request.values() if len(rows) == 2]
    assert len(both) > 20 and all(rows["a"] == rows["b"] for rows in both)  # paired: the same row for each
    assert len({r["prompt_tokens_target"] for r in records}) > 20  # many rows, not one
    report = read_report(tmp_path / "report")
    for variant in report["variants"]:
        assert set(variant["mixes"]) == {"dataset"}
        mix = variant["mixes"]["dataset"]
        assert mix["requests_per_s"] > 0 and mix["prompt_tokens"] > 0
    assert "dataset" in (tmp_path / "report" / "report.md").read_text()


def test_a_malformed_row_stops_the_run_before_any_load(tmp_path: Path) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "fine", "output_tokens": 3}\n{"prompt": "bad", "output_tokens": 0}\n', encoding="utf-8")
    scenario = write_scenario(
        tmp_path / "s.yaml",
        {"a": "http://127.0.0.1:9"},  # nothing listens: no request may be attempted
        traffic={"mixes": [{"name": "dataset"}], "dataset": {"path": str(rows)}},
    )
    proc = run_loadgen(scenario, "--workers", "0", timeout=30)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"traffic.dataset.path: {rows}:2: output_tokens: must be at least 1, got 0" in proc.stderr
    assert not (tmp_path / "report").exists()
