"""GuideLLM (0.8+) as a peer: a scenario file with a concurrent profile, synthetic text, and a JSON output to read."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any

import orjson

from bench.common import run_client
from bench.grading import Grade
from bench.runners import Job, Result
from bench.server import _WORDS


def _data(job: Job, path: Path) -> Path:
    """Prompts of 32 bench words each (every word one token in the bench tokenizer), enough for the run: GuideLLM's
    synthetic text is drawn from a corpus the bench's word-level tokenizer mostly cannot read, so its 32-token prompts
    decode to a few words."""
    per_req_s = job.ttft_ms / 1e3 + job.output_tokens * job.itl_ms / 1e3
    rows = int(job.seconds * max(job.rate, job.streams / max(per_req_s, 1e-3)) * 1.5) + 2 * job.streams + 100
    rng = random.Random(1)
    lines = [
        orjson.dumps({"prompt": " ".join(rng.choices(_WORDS, k=32)), "output_tokens_count": job.output_tokens})
        for _ in range(rows)
    ]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _scenario(job: Job, tokenizer: Path, out: Path) -> dict[str, Any]:
    profile: dict[str, Any] = {"kind": "concurrent", "streams": [job.streams]}
    if job.rate:
        profile = {"kind": "constant", "rate": [job.rate]}
    data: dict[str, Any] = {"kind": "synthetic_text", "prompt_tokens": 32, "output_tokens": job.output_tokens}
    if job.per_request:
        data = {"kind": "json_file", "path": str(_data(job, out.parent / "prompts.jsonl"))}
    return {
        "metadata": {"name": "loadgen-bench"},
        "spec": {
            "backend": {
                "kind": "openai_http",
                "target": job.base_url,
                "model": "bench",
                "http2": False,
                "request_format": "/v1/completions" if job.completions else "/v1/chat/completions",
            },
            "profile": profile,
            "constraints": [{"kind": "max_duration", "seconds": job.seconds}],
            "tokenizer": {"kind": "hf_auto", "model": str(tokenizer)},
            "data": [data],
            "outputs": [{"kind": "json", "path": str(out)}],
        },
    }


def _find(obj: Any, key: str) -> Any:
    """First value under `key` anywhere in a nested JSON document."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for v in obj.values():
            found = _find(v, key)
            if found is not None:
                return found
    elif isinstance(obj, list):
        for v in obj:
            found = _find(v, key)
            if found is not None:
                return found
    return None


def _pcts(metric: Any) -> tuple[float, float]:
    """(p50, p99) in ms of a GuideLLM distribution summary (successful requests)."""
    if not isinstance(metric, dict):
        return math.nan, math.nan
    dist = metric.get("successful", metric)
    p = dist.get("percentiles", {}) if isinstance(dist, dict) else {}
    p50 = p.get("p50", dist.get("median") if isinstance(dist, dict) else None)
    p99 = p.get("p99")
    return (float(p50) if p50 is not None else math.nan), (float(p99) if p99 is not None else math.nan)


def run(job: Job, binary: Path, tokenizer: Path) -> Result:
    wd = job.workdir
    out = wd / "benchmarks.json"
    scen = wd / "guidellm-scenario.json"
    scen.write_bytes(orjson.dumps(_scenario(job, tokenizer, out), option=orjson.OPT_INDENT_2))
    cmd = [str(binary), "run", "--scenario", str(scen), "--disable-console-interactive"]
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL": "WARNING"}
    cmd = job.cores.pin(job.cores.client, cmd)
    run = run_client(cmd, env=env, timeout=job.seconds * 4 + 240, cwd=wd, log=wd / "client.log", samples=job.samples)
    res = Result("guidellm", ok=out.exists(), run=run, cmd=cmd, outputs=out)
    if not out.exists():
        res.note = f"no benchmarks.json (exit {run.returncode}): {run.output[-300:]}"
        return res
    doc = orjson.loads(out.read_bytes())
    bench = (doc.get("benchmarks") or [{}])[0]
    metrics = bench.get("metrics", bench)
    ttft50, ttft99 = _pcts(_find(metrics, "time_to_first_token_ms"))
    itl50, itl99 = _pcts(_find(metrics, "inter_token_latency_ms"))
    counts = _find(metrics, "request_totals") or {}
    g = Grade("guidellm", requests=int(counts.get("successful", 0)) if isinstance(counts, dict) else 0)
    g.reported = {"ttft_p50": ttft50, "ttft_p99": ttft99, "itl_p50": itl50, "itl_p99": itl99}
    res.grade = g
    return res
