"""The openai-responses dialect end to end against the real llama.cpp server's `/v1/responses` (0.6.0-dev).

llama.cpp's Responses stream carries its `timings` as its chat stream does: with `timings_per_token: true` in every
`response.output_text.delta` (a cumulative `predicted_n`, so exact tokens per event), and always beside the response
in `response.completed`. So the checks are test_llamacpp.py's, on two variants of the one server: `timings` (counts
from the server's per-event count) and `usage` (no per-event count: one token an event, the final usage's total):
- token counts: every record's output tokens are the server's usage, and the streamed events' tokens are that or one
  fewer (an end-of-sequence token has no event); the prompt tokens are its input_tokens;
- exact output: `exact_output` (on by default) sends `ignore_eos: true`, which llama.cpp's Responses endpoint honours:
  every reply is its drawn max_output_tokens long (llama.cpp says `completed`, not `incomplete`, at the cap);
- TPOT vs the server's predicted_ms / (predicted_n − 1): median relative difference within 10 %;
- TTFT vs prompt_ms: never before it (how far after is test_llamacpp.py's subject: here two variants share the
  server's slots, and a prompt waits for the others' batch outside its prompt_ms).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.integration.harness import quantile, read_records, read_report, run_loadgen

from .test_llamacpp import TPOT_REL_TOL


def _scenario(path: Path, url: str) -> Path:
    base = {"base_url": url, "model": "smollm2", "dialect": "openai-responses"}
    doc = {
        "name": "responses-llamacpp",
        "seed": 5,
        "variants": [
            {"name": "timings", **base, "extra_body": {"timings_per_token": True}},
            {"name": "usage", **base},
        ],
        "traffic": {
            "mixes": [{"name": "chat-small", "weight": 1}],
            "custom_mixes": {
                "chat-small": {
                    "system_prompt_tokens": 20,
                    "buckets": [{"name": "short", "prompt_tokens": [30, 160], "weight": 1}],
                    "output_tokens": [16, 64],
                }
            },
        },
        "load": {"users": 2, "spawn_rate": 2, "duration": "25s", "warmup": 0},
        "slos": [{"metric": "ttft", "stat": "p99", "max_ms": 60000}],
        "report_dir": str(path.parent / "report"),
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _check_variant(name: str, records: list[dict[str, Any]]) -> None:
    assert len(records) >= 4, name
    overhead_ms, tpot_rel, step_ms = [], [], []
    for r in records:
        st = r["server_timings"]
        assert st is not None, "llama.cpp's timings (beside the completed response) must be captured"
        # The server's usage, its own count and the drawn length agree: ignore_eos holds on /v1/responses.
        assert r["output_tokens"] == st["predicted_n"] == r["max_tokens"], r["id"]
        assert sum(r["chunk_tokens"]) in (r["output_tokens"], r["output_tokens"] - 1), r["id"]
        assert r["prompt_tokens"] is not None and r["prompt_tokens"] > 0
        assert r["finish_reason"] == "stop"  # llama.cpp's status is `completed` at the cap too
        overhead_ms.append(r["ttft"] * 1e3 - st["prompt_ms"])
        step_ms.append(st["predicted_per_token_ms"])
        if st["predicted_n"] > 2 and r["tpot"]:
            server_tpot_ms = st["predicted_ms"] / (st["predicted_n"] - 1)
            tpot_rel.append(abs(r["tpot"] * 1e3 - server_tpot_ms) / server_tpot_ms)
    step = quantile(step_ms, 0.5)
    print(f"{name}: {len(records)} requests, tokens {sum(r['output_tokens'] for r in records)} (= the server's usage)")
    print(f"{name}: TTFT − prompt_ms p50 {quantile(overhead_ms, 0.5):.1f} ms, server decode step {step:.1f} ms")
    print(f"{name}: TPOT relative diff median {quantile(tpot_rel, 0.5):.3f}, p90 {quantile(tpot_rel, 0.9):.3f}")
    assert min(overhead_ms) > -1.0, "the client cannot see a token before the server finished the prompt"
    assert quantile(tpot_rel, 0.5) <= TPOT_REL_TOL


def test_counts_exact_output_and_tpot_agree_with_the_server(llama_server: str, tmp_path: Path) -> None:
    proc = run_loadgen(
        _scenario(tmp_path / "s.yaml", llama_server),
        "--workers",
        "1",
        "--raw-records",
        str(tmp_path / "raw"),
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [r for r in read_records(tmp_path / "raw") if r["error"] is None and not r["cut_by_stop"]]
    timings = [r for r in rows if r["variant"] == "timings"]
    usage = [r for r in rows if r["variant"] == "usage"]
    _check_variant("timings", timings)
    _check_variant("usage", usage)
    assert {r["token_source"] for r in timings} == {"server"}
    assert {r["token_source"] for r in usage} <= {"one_per_chunk", "usage_spread"}
    report = read_report(tmp_path / "report")
    for v in report["variants"]:
        assert v["output_length"] == "enforced", v["name"]
        assert v["overall"]["errors"] == {}, v["name"]
