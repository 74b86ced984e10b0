"""Production traces and cancellations (issue 22, items 1 and 7) against the real llama.cpp server, checked against
its own counts: the usage and timings it returned per request, and its /metrics.

- Trace: a window of the shipped Mooncake sample, with the model's tokenizer. Every request's prompt, as the server
  counted it, is the row's input_length plus the chat template's tokens, its output the row's output_length
  (`ignore_eos`), its send the row's scaled offset within the schedule's slip, and a row sharing hash blocks with an
  earlier one gets exactly those blocks (and the template's opening) from the server's prompt cache.
- Cancellations: half the requests given up after a drawn 2-10 streamed tokens. The report counts them apart from
  successes and errors, each holds the drawn count (what came in the read that reached it aside), and the server's
  `llamacpp:tokens_predicted_total` grew by what the requests received, give or take a token or two a given-up one
  generated before the server saw its client go: far fewer than their max_tokens.

One server (the session's `llama_server`: 4 slots, 1 thread, 5-7 ms a prompt token here). ~32 s for both on a busy
2-core machine: the trace ~20 s (its 9.5 s window, and ~4 s in each of loadgen's two processes to read the GGUF's
vocabulary for exact lengths), the cancellations ~9 s.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadgen.config.cancel import Cancel, CancelPlan
from loadgen.config.trace import TraceReplay
from loadgen.traffic.trace_file import trace_of
from tests.integration.harness import read_records, read_report, run_loadgen

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = Path(str(resources.files("loadgen") / "examples" / "traces" / "mooncake-sample.jsonl"))

# The sample's rows are Mooncake-sized (1.6k-3.5k tokens in 512-token blocks): ~10-20 s of prefill each on the
# server's one thread (6-11 ms a token measured here, as the machine's other core is busy). So the test replays the
# sample scaled down 8x in length: every row's timestamp and hash_ids as shipped, its input and output lengths / 8,
# in 64-token blocks (512 / 8: a shared prefix keeps its share of the prompt). The window is rows 27-29 (counted
# from 0: lines 28-30; trace time 3447, 3656 and 3826 ms; 202, 218 and 274 tokens), all three opening with blocks
# 1006, 1007: rows 28 and 29 each share 128 tokens with the row before. Stretched 25x, so each is sent once the one
# before is done (a slot busy with a prompt cannot lend it; the request would go to an idle slot and prefill cold):
# 5.2 s and 4.25 s apart, against 0.9-1.7 s measured for a row of ~220 tokens and 8-14 output tokens (up to ~2.5 s
# on a busy machine).
SCALE_DOWN = 8
TRACE_WINDOW = {"start": "3447ms", "duration": "390ms", "time_scale": 25, "block_tokens": 512 // SCALE_DOWN}
# Generous for two shared cores: sends are judged against their schedule by this.
SLIP_S = 0.05
# Tokens a given-up request may have generated past what loadgen received: the server writes each token as it comes
# (~15 ms apart) and stops at the first write that finds the connection gone. Measured on an idle machine: 0-2 (the
# server's log: n_tokens at the slot's release); 4.5 on average once in CI with other test processes busy on both
# cores (the tokens the server wrote while the client was slow to read them, then close). So the test holds the
# server to a stop well before max_tokens (SAVED_AT_LEAST each), not to the slack a quiet machine shows.
CANCEL_SLACK = 4
SAVED_AT_LEAST = 10


def _scenario(
    tmp: Path, name: str, url: str, traffic: dict[str, Any], load: dict[str, Any], exact_lengths: bool
) -> Path:
    [model] = sorted((ROOT / ".cache" / "llama" / "model").glob("*.gguf"))
    doc: dict[str, Any] = {
        "name": name,
        "seed": 5,
        # Exact lengths: one-token words, counted in the server's own vocabulary. Reading the GGUF's vocabulary
        # costs ~4 s in each of loadgen's two processes, so only the test that needs it has it.
        **({"tokenizer": str(model)} if exact_lengths else {}),
        "variants": [
            {"name": "llamacpp", "base_url": url, "model": "smollm2", "extra_body": {"ignore_eos": True}},
        ],
        "traffic": traffic,
        "load": {"spawn_rate": 10, "warmup": 0, **load},
        "slos": [],
        # A few requests on a busy machine: one send 5 ms late would be the p99 over the default 5 ms bound and the
        # run untrustworthy (exit 3). The sends are judged against SLIP_S below.
        "run_trust": {"loop_lag_p99_ms": 200, "schedule_slip_p99_ms": SLIP_S * 1000},
        "report_dir": str(tmp / name / "report"),
    }
    path = tmp / name / "s.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _run(scenario: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    raw = scenario.parent / "raw"
    proc = run_loadgen(scenario, "--workers", "0", "--raw-records", str(raw), timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return read_report(scenario.parent / "report"), read_records(raw)


def _post(url: str, path: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(url + path, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as reply:
        return json.load(reply)


def _tokenize(url: str, text: str) -> list[int]:
    tokens: list[int] = _post(url, "/tokenize", {"content": text})["tokens"]
    return tokens


def _metrics(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=10) as reply:
        text = reply.read().decode()
    return {m[1]: float(m[2]) for m in re.finditer(r"^llamacpp:(\w+) (\S+)$", text, re.M)}


def _idle_metrics(url: str) -> dict[str, float]:
    """The server's counters once no request is in flight (a request whose client left is released at the next
    token; an earlier test's cut requests too)."""
    deadline = time.monotonic() + 30
    while (m := _metrics(url))["requests_processing"] > 0:
        assert time.monotonic() < deadline, "llama-server still busy after 30 s"
        time.sleep(0.1)
    return m


def test_a_mooncake_window_replays_with_the_servers_counts(llama_server: str, tmp_path: Path) -> None:
    scaled = tmp_path / "mooncake-sample-scaled.jsonl"
    with SAMPLE.open(encoding="utf-8") as sample, scaled.open("w", encoding="utf-8") as out:
        for line in sample:
            row = json.loads(line)
            for column in ("input_length", "output_length"):
                row[column] = max(1, row[column] // SCALE_DOWN)
            out.write(json.dumps(row) + "\n")
    traffic = {"trace": {"path": str(scaled), **TRACE_WINDOW}, "mixes": [{"name": "trace"}], "custom_mixes": {}}
    # Two senders: each row goes out on time whatever the one before is doing. The stop comes after the last row is
    # sent (9.5 s); the drain (30 s by default) lets it finish.
    scenario = _scenario(tmp_path, "trace", llama_server, traffic, {"users": 2, "duration": "10s"}, True)
    report, records = _run(scenario)
    rows = trace_of(TraceReplay.model_validate({"path": str(scaled), **TRACE_WINDOW})).rows
    # The chat template's tokens, as the server renders and counts them: SmolLM2's puts its default system prompt
    # first when the request has none, so every prompt opens with the same tokens, before the user's text.
    rendered = _post(llama_server, "/apply-template", {"messages": [{"role": "user", "content": "alpha"}]})["prompt"]
    overhead = len(_tokenize(llama_server, rendered)) - len(_tokenize(llama_server, "alpha"))
    opening = len(_tokenize(llama_server, rendered.split("alpha")[0]))
    print(f"template: {overhead} tokens a prompt, {opening} of them before the user's text")
    assert [(r.line, r.input_tokens, r.output_tokens, r.hash_ids[:2]) for r in rows] == [
        (28, 202, 8, (1006, 1007)),
        (29, 218, 14, (1006, 1007)),
        (30, 274, 7, (1006, 1007)),
    ]
    o = report["variants"][0]["open_loop"]
    assert o["kind"] == "trace" and o["arrivals"] == o["sent"] == len(rows) and o["trace"]["rows_in_window"] == 3
    mine = {int(r["id"].rsplit("-", 1)[1]): r for r in records}
    assert sorted(mine) == list(range(len(rows)))
    # What loadgen built: the rows' lengths (its target, as the server counts it: the chat template's tokens too), and
    # two 64-token blocks shared with an earlier row for rows 28 and 29.
    built = [(r["prompt_tokens_target"] - overhead, r["max_tokens"]) for r in mine.values()]
    assert built == [(202, 8), (218, 14), (274, 7)]
    assert [r["shared_prefix_tokens"] for r in mine.values()] == [0, 128, 128]
    origin = mine[0]["scheduled"]
    for k, r in mine.items():
        row, timings = rows[k], r["server_timings"]
        assert r["error"] is None and not r["cut_by_stop"] and not r["cancelled"], r
        # Sent on the trace's scaled offset, within the slip.
        assert abs(r["scheduled"] - origin - row.offset) < 1e-6 and 0 <= r["sent"] - r["scheduled"] < SLIP_S, k
        # The server's counts: usage and its timings (cache_n + prompt_n is the whole prompt).
        assert r["prompt_tokens"] == row.input_tokens + overhead == timings["cache_n"] + timings["prompt_n"], k
        assert r["output_tokens"] == row.output_tokens == timings["predicted_n"], k
        print(
            f"row {row.line - 1}: sent {r['sent'] - origin:.3f} s (offset {row.offset:.3f}), prompt "
            f"{r['prompt_tokens']} = {row.input_tokens} + {overhead}, cache_n {timings['cache_n']}, prompt_n "
            f"{timings['prompt_n']} in {timings['prompt_ms']:.0f} ms, output {r['output_tokens']}"
        )
    # The first row shares nothing earlier in the window: at most the template's opening (plus a token or two of
    # chance: an earlier test's prompt) came from a slot's last prompt. Each later row was sent after the one before
    # ended (the window's time_scale), so the slot llama.cpp chose for it (the idle slot whose last prompt shares the
    # longest prefix) held that row's prompt: it reused the opening and exactly the two shared blocks, and prefilled
    # only the rest (the next block opens with another tag).
    assert mine[0]["cached_prompt_tokens"] <= opening + 2
    for k in range(1, len(rows)):
        assert mine[k - 1]["done"] < mine[k]["sent"], f"row {k - 1} still running when row {k} was sent: too slow"
        assert mine[k]["cached_prompt_tokens"] == opening + mine[k]["shared_prefix_tokens"], k
        assert mine[k]["server_timings"]["prompt_n"] == rows[k].input_tokens + overhead - opening - 128, k


def test_given_up_requests_are_counted_apart_and_the_server_stops_generating(llama_server: str, tmp_path: Path) -> None:
    cancel = {"share": 0.5, "after_tokens": [2, 10]}
    traffic = {
        "mixes": [{"name": "m"}],
        "custom_mixes": {"m": {"buckets": [{"name": "s", "prompt_tokens": [80, 120]}], "output_tokens": [32, 48]}},
        "cancel": cancel,
    }
    scenario = _scenario(tmp_path, "cancel", llama_server, traffic, {"users": 2, "duration": "6s"}, False)
    before = _idle_metrics(llama_server)
    report, records = _run(scenario)
    after = _idle_metrics(llama_server)
    overall = report["variants"][0]["overall"]
    given_up = [r for r in records if r["cancelled"]]
    finished = [r for r in records if not r["cancelled"]]
    plan = CancelPlan(Cancel.model_validate(cancel), 5)
    assert len(given_up) >= 2 and len(finished) >= 1, (len(given_up), len(finished))
    assert overall["cancelled"] == len(given_up) and overall["ok"] == len(finished) == overall["requests"]
    # Not in E2E (they did not end), in TTFT (their first token came).
    assert overall["metrics_ms"]["e2e"]["count"] == len(finished)
    assert overall["metrics_ms"]["ttft"]["count"] == len(records) and all(r["chunk_times"] for r in given_up)
    exact = 0
    received_given_up = 0
    for r in given_up:
        _, stream, index = r["id"].rsplit("-", 2)
        kind, n = plan.draw(int(stream), int(index), 0)  # type: ignore[misc]
        received, times = sum(r["chunk_tokens"]), r["chunk_times"]
        assert kind == "tokens" and r["error"] is None and not r["cut_by_stop"], r["id"]
        # Given up with the read that reached the drawn count: what else came in that read came with it.
        reached = next(k for k in range(len(times)) if sum(r["chunk_tokens"][: k + 1]) >= n)
        assert received >= n and set(times[reached:]) == {r["done"]}, (r["id"], n, r["chunk_tokens"], times)
        exact += received == n
        received_given_up += received
    for r in finished:  # let finish: not drawn, or drawn at or past its length
        drawn = plan.draw(*map(int, r["id"].rsplit("-", 2)[1:]), 0)
        assert r["error"] is None and not r["cut_by_stop"] and r["output_tokens"] == r["max_tokens"], r
        assert drawn is None or drawn[1] >= r["max_tokens"], r["id"]
    # The server's side: it generated what the finished requests got and what the given-up ones received, plus a
    # few each before it saw the client go (CANCEL_SLACK on a quiet machine), and stopped there (it counts an
    # aborted request's tokens in tokens_predicted_total when it releases the slot).
    predicted = after["tokens_predicted_total"] - before["tokens_predicted_total"]
    finished_tokens = sum(r["output_tokens"] for r in finished)
    all_max = sum(r["max_tokens"] for r in records)
    print(
        f"{len(records)} requests, {len(given_up)} given up ({exact} at exactly the drawn count, received "
        f"{received_given_up} tokens); server predicted {predicted:.0f} tokens: finished {finished_tokens} + given up "
        f"{predicted - finished_tokens:.0f}, against {all_max} if all had run to max_tokens"
    )
    assert finished_tokens + received_given_up <= predicted
    slack = (predicted - finished_tokens - received_given_up) / len(given_up)
    print(f"given-up requests: {slack:.1f} tokens each past what loadgen received (quiet machine: <= {CANCEL_SLACK})")
    # The server stopped well before max_tokens: each given-up request cost it at least SAVED_AT_LEAST tokens fewer
    # (max_tokens >= 32, drawn <= 10: 22 left to generate at least, of which a slow machine's slack takes a few).
    assert all_max - predicted >= SAVED_AT_LEAST * len(given_up), (all_max, predicted, len(given_up))
