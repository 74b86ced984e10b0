"""Production traces (`traffic.trace`): the three formats read and windowed, the schedule their rows make, the prompts
their lengths and shared blocks make, and the errors a bad file or scenario gets (exit 2, naming what)."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from loadgen.config.errors import ConfigError, SubpathIssues
from loadgen.config.scenario import Scenario, parse_scenario
from loadgen.config.trace import TraceReplay
from loadgen.traffic.arrivals import ArrivalSchedule, schedule_arrivals
from loadgen.traffic.sampler import sampler_for
from loadgen.traffic.scenario_schedule import requested_in_window, schedule_of, trace_summary
from loadgen.traffic.trace_file import read_trace

TRACES = Path(str(resources.files("loadgen") / "examples" / "traces"))
MOONCAKE = TRACES / "mooncake-sample.jsonl"


def _scenario(trace: dict[str, Any], **load: Any) -> Scenario:
    doc = {
        "name": "t",
        "variants": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}],
        "traffic": {"trace": trace},
        "load": {"users": 4, **load},
    }
    import yaml

    return parse_scenario(yaml.safe_dump(doc), "s.yaml")


@pytest.mark.parametrize(
    ("name", "fmt", "rows", "failed"),
    [
        ("mooncake-sample.jsonl", "mooncake", 200, 0),
        ("azure-sample.csv", "azure", 200, 0),
        ("burstgpt-sample.csv", "burstgpt", 194, 6),
    ],
)
def test_each_sample_is_recognised_and_read_whole(name: str, fmt: str, rows: int, failed: int) -> None:
    trace = read_trace(TraceReplay(path=str(TRACES / name)))
    assert trace.format == fmt and len(trace.rows) == rows and trace.failed_left_out == failed
    assert trace.rows_in_file == rows + failed
    offsets = trace.offsets
    assert offsets[0] == 0.0 and list(offsets) == sorted(offsets)
    assert all(r.input_tokens >= 1 and r.output_tokens >= 1 for r in trace.rows)


def test_offsets_are_the_file_timestamps_windowed_and_scaled() -> None:
    lines = MOONCAKE.read_text(encoding="utf-8").splitlines()
    import json

    stamps = [json.loads(line)["timestamp"] / 1000 for line in lines]
    whole = read_trace(TraceReplay(path=str(MOONCAKE)))
    assert [r.offset for r in whole.rows] == pytest.approx([t - stamps[0] for t in stamps], abs=1e-9)
    window = read_trace(TraceReplay(path=str(MOONCAKE), start="5s", duration="10s", time_scale=0.5))
    expected = [(t - stamps[0] - 5) * 0.5 for t in stamps if 5 <= t - stamps[0] < 15]
    assert [r.offset for r in window.rows] == pytest.approx(expected, abs=1e-9)
    assert window.span_s == pytest.approx(5.0)  # 10 s of trace time at twice the speed


def test_a_trace_schedule_splits_round_robin_and_its_union_is_the_trace() -> None:
    sc = _scenario({"path": str(MOONCAKE)}, duration="25s")
    schedule = schedule_of(sc)
    assert schedule is not None and schedule.kind == "trace" and schedule.offsets is not None
    one = list(schedule_arrivals(schedule, 7))
    assert [t for _, t in one] == list(schedule.offsets) and [i for i, _ in one] == list(range(200))
    shares = [list(schedule_arrivals(schedule, 7, w, 3)) for w in range(3)]
    assert sorted(p for share in shares for p in share) == one
    assert all(i % 3 == w for w, share in enumerate(shares) for i, _ in share)
    # The requested rate over a window is the rows there per second (the first row, at 0, is in a window from 0).
    assert requested_in_window(schedule, 0.0, 25.0) == pytest.approx(200 / 25, abs=1e-4)
    with pytest.raises(ValueError, match="offsets"):
        ArrivalSchedule("trace", 1.0)


def _common(a: list[str], b: list[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_prompts_have_the_rows_lengths_and_shared_blocks_are_shared_prefixes() -> None:
    sc = _scenario({"path": str(MOONCAKE)}, duration="25s")
    sampler = sampler_for(sc, 0)
    rows = read_trace(TraceReplay(path=str(MOONCAKE))).rows
    specs = [sampler.spec_at(i) for i in range(len(rows))]
    words = [s.prompt.split(" ") for s in specs]
    seen: set[int] = set()
    for spec, row, w in zip(specs, rows, words, strict=True):
        # Row k is request k of the open-loop stream: its length in words (tokens without a tokenizer), its output.
        assert spec.prompt_tokens == len(w) == row.input_tokens and spec.max_tokens == row.output_tokens
        assert spec.mix == "trace" and spec.system_prompt == ""
        k = next((j for j, h in enumerate(row.hash_ids) if h not in seen), len(row.hash_ids))
        assert spec.shared_prefix_tokens == min(k * 512, row.input_tokens)
        seen.update(row.hash_ids)
    shared_pairs = 0
    for i in range(len(rows)):
        for j in range(i):
            k = _common(list(rows[i].hash_ids), list(rows[j].hash_ids))
            c = _common(words[i], words[j])
            bound = min(k * 512, len(words[i]), len(words[j]))
            # Exactly the k shared blocks; the next blocks differ within their three-word tags (a first word alike by
            # chance, 1 in ~500, adds a word or two, never a block).
            assert bound <= c < bound + 3, (i, j, k, c)
            shared_pairs += k > 0
    assert shared_pairs > 500  # the sample's conversations and system prompts share blocks


def test_rows_without_ids_are_prompts_of_their_own() -> None:
    sc = _scenario({"path": str(TRACES / "azure-sample.csv")}, duration="25s")
    sampler = sampler_for(sc, 0)
    specs = [sampler.spec_at(i) for i in range(50)]
    assert all(s.shared_prefix_tokens == 0 for s in specs)
    assert len({s.prompt.split(" ")[0:3].__repr__() for s in specs}) == 50  # every tag its own
    assert trace_summary(sc.traffic.trace)["rows_in_window"] == 200  # type: ignore[arg-type]


def test_the_scenario_takes_the_trace_as_its_arrivals_and_only_mix() -> None:
    sc = _scenario({"path": str(MOONCAKE)}, duration="25s")
    assert sc.load.arrival is not None and sc.load.arrival.kind == "trace"
    assert [m.name for m in sc.traffic.mixes] == ["trace"]
    # Another kind of arrivals sends the rows in order on its own schedule.
    sc = _scenario({"path": str(MOONCAKE)}, duration="25s", arrival={"kind": "poisson", "rate": 5})
    assert sc.load.arrival is not None and sc.load.arrival.kind == "poisson"


@pytest.mark.parametrize(
    ("change", "where", "what"),
    [
        ({"load": {"arrival": {"kind": "trace"}}, "traffic": {}}, "load.arrival.kind", "needs traffic.trace"),
        ({"load": {"arrival": {"kind": "trace", "rate": 3}}}, "load.arrival.rate", "trace's own times"),
        ({"traffic": {"mixes": [{"name": "chat"}]}}, "traffic.mixes", "only {name: trace}"),
        ({"traffic": {"dataset": {"path": "x.jsonl"}}}, "traffic.trace", "not both"),
        ({"traffic": {"trace": {"path": "t", "time_scale": 0}}}, "traffic.trace.time_scale", "greater than 0"),
    ],
)
def test_the_model_refuses_a_trace_it_cannot_replay(change: dict[str, Any], where: str, what: str) -> None:
    import yaml

    doc: dict[str, Any] = {
        "name": "t",
        "variants": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}],
        "traffic": {"trace": {"path": str(MOONCAKE)}},
        "load": {"users": 4, "duration": "25s"},
    }
    for key, value in change.items():
        doc[key] = {**doc[key], **value} if value else {}
    with pytest.raises(ConfigError) as exc:
        parse_scenario(yaml.safe_dump(doc), "s.yaml")
    text = str(exc.value)
    assert where in text and what in text, text


@pytest.mark.parametrize(
    ("name", "content", "what"),
    [
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": 5, "output_length": 3}\n{"timestamp": 9, "input_length": 5}\n',
            "t.jsonl:2: output_length: missing",
        ),
        (
            "t.jsonl",
            '{"timestamp": 0, "input_length": 0, "output_length": 3}\n',
            "t.jsonl:1: input_length: expected a whole number >= 1",
        ),
        (
            "t.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,5\nyesterday,10,5\n",
            "t.csv:3: TIMESTAMP: expected a time",
        ),
        (
            "t.csv",
            "Timestamp,Request tokens,Response tokens\n0.5,ten,5\n",
            "t.csv:2: Request tokens: expected a whole number",
        ),
        ("t.csv", "when,prompt,reply\n1,2,3\n", "t.csv:1: not a trace loadgen knows"),
    ],
)
def test_a_malformed_file_is_exit_2_naming_file_line_and_column(
    tmp_path: Path, name: str, content: str, what: str
) -> None:
    (tmp_path / name).write_text(content, encoding="utf-8")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: t\nvariants: [{name: a, base_url: 'http://127.0.0.1:9', model: m}]\n"
        f"traffic: {{trace: {{path: {name}}}}}\nload: {{users: 2, duration: 5s}}\n",
        encoding="utf-8",
    )
    proc = subprocess.run(
        [sys.executable, "-m", "loadgen.cli", "validate", str(scenario)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "traffic.trace.path" in proc.stderr and what in proc.stderr, proc.stderr


def test_a_trace_longer_than_the_default_duration_asks_for_one(tmp_path: Path) -> None:
    trace = tmp_path / "long.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 5, "output_length": 3}\n'
        '{"timestamp": 90000, "input_length": 5, "output_length": 3}\n',
        encoding="utf-8",
    )
    from loadgen.preflight import parse_checked

    text = (
        "name: t\nvariants: [{name: a, base_url: 'http://127.0.0.1:9', model: m}]\n"
        f"traffic: {{trace: {{path: {trace}}}}}\n"
    )
    with pytest.raises(ConfigError, match=r"last row at 90s but the run lasts 60s .*load.duration to 91s"):
        parse_checked(text, "s.yaml")
    assert parse_checked(text + "load: {duration: 30s}\n", "s.yaml").load.duration == 30  # cut short on purpose


def test_windowing_past_the_trace_names_start() -> None:
    with pytest.raises(SubpathIssues) as exc:
        read_trace(TraceReplay(path=str(MOONCAKE), start="1h"))
    assert exc.value.issues[0][0] == ("start",)


def test_a_rate_sweep_of_a_trace_keeps_its_times_scaled_to_each_rate(tmp_path: Path) -> None:
    import yaml

    from loadgen.cli.sweep import _step_doc

    raw = {
        "name": "t",
        "variants": [{"name": "a", "base_url": "http://127.0.0.1:9", "model": "m"}],
        "traffic": {"trace": {"path": str(MOONCAKE)}},
        "load": {"users": 4, "duration": "25s"},
    }
    sc = parse_scenario(yaml.safe_dump(raw))
    doc = _step_doc(raw, sc, 0, 20.0, "10s", tmp_path)
    # The sample is 200 rows over 19.25 s (10.39 req/s): 20 req/s is the same trace at 0.52 of its time scale.
    assert doc["load"]["arrival"] == {"kind": "trace"} and doc["load"]["duration"] == "10s"
    assert doc["traffic"]["trace"]["time_scale"] == pytest.approx(200 / 19.25 / 20.0)
    step = parse_scenario(yaml.safe_dump(doc))
    schedule = schedule_of(step)
    assert schedule is not None and schedule.rate == pytest.approx(20.0)


@pytest.mark.parametrize("tz", ["UTC", "America/New_York"])
def test_azure_times_are_utc_whatever_the_machines_zone(
    tz: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Azure traces' times carry no zone. Read in New York's local time, 2024-03-10 02:30 does not exist (the
    clocks jump from 02:00 to 03:00) and the hour around it collapses: the offsets must be UTC's under any TZ."""
    import time
    from datetime import datetime

    trace_file = tmp_path / "azure-dst.csv"
    trace_file.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-03-10 01:30:00.0000000,100,10\n"
        "2024-03-10 02:30:00.0000000,100,10\n"
        "2024-03-10 03:30:00.5000000,100,10\n"
        "2024-03-10 05:30:00+01:00,100,10\n",  # a time with its own offset keeps it (04:30 UTC)
        encoding="utf-8",
    )
    monkeypatch.setenv("TZ", tz)
    time.tzset()
    try:
        if tz != "UTC" and datetime(2024, 3, 10, 3, 30).timestamp() - datetime(2024, 3, 10, 1, 30).timestamp() != 3600:
            pytest.skip(f"no zone data for {tz}: the machine's local time would not show the DST change")
        offsets = read_trace(TraceReplay(path=str(trace_file))).offsets
    finally:
        monkeypatch.undo()
        time.tzset()
    assert offsets == (0.0, 3600.0, 7200.5, 10800.0)
