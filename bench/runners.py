"""How each client is run against the bench server, and how its own numbers are read back.

Every runner takes the same job (`Job`: server URL, concurrent streams, output tokens, seconds) and returns a
`Result`: the grade (what the tool reported, and paired errors where it keeps per-request ids), its CPU, and its
loop lag when it measures one. Peers (GuideLLM, inference-perf) run from virtualenvs outside the repo; when one is
not installed the result says so, with the command that installs it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import yaml

from bench.common import VENVS, ClientRun, Cores, run_client
from bench.grading import Grade, Truth, grade_records, read_records

__all__ = ["CLIENTS", "INSTALL", "Job", "Result", "installed"]


@dataclass
class Job:
    base_url: str
    streams: int
    output_tokens: int
    seconds: float
    workdir: Path
    cores: Cores
    workers: int = 0  # loadgen only: worker processes (0 = one local process)
    raw: bool = True  # keep per-request records for the paired grade
    itl_ms: float = 10.0
    ttft_ms: float = 20.0
    warmup_s: float = 0.0  # loadgen only: its loop-lag health covers the run after this
    # bench.peers: the same workload for every tool
    completions: bool = False  # /v1/completions (every peer can send it) instead of chat
    usage: bool = True  # ask the server for token counts per chunk where the tool has the option, else count text
    rate: float = 0.0  # open loop at a constant rate (requests/s); 0: closed loop with `streams`
    per_request: bool = False  # peers: write their per-request output (read by bench.peer_outputs)
    samples: list[tuple[float, float]] | None = None  # the tool's CPU over time (common.run_client)


@dataclass
class Result:
    client: str
    ok: bool
    run: ClientRun | None = None
    grade: Grade | None = None
    lag_p99_ms: float | None = None
    report: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    records: Path | None = None  # raw per-request records, for the paired grade
    cmd: list[str] = field(default_factory=list)  # the command as run (the tool's config file beside it)
    outputs: Path | None = None  # the tool's own output file or folder (bench.peer_outputs reads it)

    def graded(self, truth: Truth | None) -> Result:
        """Add the paired errors (and, for clients that report nothing themselves, the percentiles)."""
        if truth is None or self.records is None:
            return self
        g = grade_records(self.client, read_records(self.records), truth)
        if self.grade is None:
            self.grade = g
        else:
            self.grade.paired = g.paired
        if self.grade.requests == 0:
            self.ok = False
            self.note = self.note or "no completed requests"
        return self


# Installed (pinned, idempotently) by bench/peer_install.py into $BENCH_VENVS (default .cache/peers).
INSTALL = {name: f"python -m bench.peers --install {name}" for name in ("guidellm", "inference-perf", "aiperf")}


def peer_bin(name: str) -> Path:
    return VENVS / name / "bin" / name


def installed(name: str) -> bool:
    return name not in INSTALL or peer_bin(name).exists()


# ---------------------------------------------------------------------------------------------------------------
# loadgen


def _scenario(job: Job, path: Path) -> Path:
    users = job.streams
    doc = {
        "name": "bench",
        "seed": 1,
        "variants": [
            {
                "name": "bench",
                "base_url": job.base_url,
                "model": "bench",
                "dialect": "openai-completions" if job.completions else "openai-chat",
                "continuous_usage_stats": job.usage,
                "request_timeout": "120s",
                "read_timeout": "60s",
            }
        ],
        "traffic": {
            "mixes": [{"name": "bench", "weight": 1}],
            "custom_mixes": {
                "bench": {
                    "buckets": [{"name": "s", "prompt_tokens": [32, 32], "weight": 1}],
                    "output_tokens": [job.output_tokens, job.output_tokens],
                }
            },
        },
        # Spawn everyone within about half a second, like the peers' "concurrent" modes.
        "load": {
            "users": users,
            "spawn_rate": float(max(2 * users, 10)),
            "duration": f"{job.seconds:g}s",
            "warmup": f"{job.warmup_s:g}s",
        },
        "report_dir": str(path.parent / "report"),
    }
    if job.rate:
        # Open loop: one request every 1/rate s, sent by a pool of users sized for the requests in flight.
        per_req_s = job.ttft_ms / 1e3 + job.output_tokens * job.itl_ms / 1e3
        doc["load"]["users"] = max(users, int(job.rate * per_req_s * 2) + 8)
        doc["load"]["spawn_rate"] = float(max(2 * doc["load"]["users"], 10))
        doc["load"]["arrival"] = {"kind": "constant", "rate": job.rate}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run_loadgen(job: Job, pure_python: bool = False) -> Result:
    """loadgen as shipped; with `pure_python`, with its C half switched off (LOADGEN_PURE_PYTHON=1), to show what
    the C read path buys."""
    wd = job.workdir
    scen = _scenario(job, wd / "scenario.yaml")
    cmd = [
        sys.executable,
        "-m",
        "loadgen.cli",
        "run",
        str(scen),
        "--quiet",
        "--workers",
        str(job.workers),
        "--report-dir",
        str(wd / "report"),
    ]
    if job.raw:
        cmd += ["--raw-records", str(wd / "raw")]
    env = {"LOADGEN_PURE_PYTHON": "1"} if pure_python else None
    cmd = job.cores.pin(job.cores.client, cmd)
    run = run_client(cmd, env=env, timeout=job.seconds + 120, log=wd / "client.log", samples=job.samples)
    name = "loadgen" if job.workers <= 1 else f"loadgen ×{job.workers}"
    if pure_python:
        name += " (pure Python)"
    res = Result(name, ok=(wd / "report" / "report.json").exists(), run=run, cmd=cmd, outputs=wd / "report")
    if not res.ok:
        res.note = f"no report (exit {run.returncode}): {run.output[-400:]}"
        return res
    report = orjson.loads((wd / "report" / "report.json").read_bytes())
    res.report = report
    m = report["variants"][0]["overall"].get("metrics_ms", {})
    lags = [w.get("loop_lag_ms", {}).get("p99") for w in report["run"].get("workers", {}).values()]
    lags = [x for x in lags if x is not None]
    res.lag_p99_ms = max(lags) if lags else None
    g = Grade(name, requests=report["variants"][0]["overall"].get("ok", 0))
    if job.raw:
        res.records = wd / "raw"
    # What loadgen itself reports (HDR histograms, 0.1 %), not recomputed from the raw records.
    if "ttft" in m:
        g.reported = {
            "ttft_p50": m["ttft"]["p50"],
            "ttft_p99": m["ttft"]["p99"],
            "itl_p50": m.get("itl", {}).get("p50", math.nan),
            "itl_p99": m.get("itl", {}).get("p99", math.nan),
        }
    res.grade = g
    return res


# ---------------------------------------------------------------------------------------------------------------
# Plain Locust baselines (same process model as loadgen: one Locust process, gevent)


def _run_locust_baseline(name: str, locustfile: str, job: Job) -> Result:
    wd = job.workdir
    users = job.streams
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        locustfile,
        "--headless",
        "--only-summary",
        "-u",
        str(users),
        "-r",
        str(max(2 * users, 10)),
        "-t",
        f"{job.seconds:g}s",
        "-H",
        job.base_url,
        "--stop-timeout",
        "0",
    ]
    env = {"BENCH_MAX_TOKENS": str(job.output_tokens), "BENCH_RECORDS": str(wd / "raw") if job.raw else ""}
    run = run_client(job.cores.pin(job.cores.client, cmd), env=env, timeout=job.seconds + 120, log=wd / "client.log")
    res = Result(name, ok=run.returncode in (0, 1), run=run, records=wd / "raw" if job.raw else None)
    if not res.ok:
        res.note = f"exit {run.returncode}: {run.output[-400:]}"
    return res


def run_fasthttp(job: Job) -> Result:
    return _run_locust_baseline("locust FastHttpUser", "bench/clients/fasthttp_user.py", job)


def run_httpx(job: Job) -> Result:
    return _run_locust_baseline("httpx+gevent user", "bench/clients/httpx_user.py", job)


# ---------------------------------------------------------------------------------------------------------------
# Peers


def tokenizer_dir() -> Path:
    from bench.tokenizer import ensure_tokenizer

    return ensure_tokenizer(VENVS / "tokenizer")


def run_inference_perf(job: Job) -> Result:
    name = "inference-perf"
    if not installed(name):
        return Result(name, ok=False, note=f"not installed: {INSTALL[name]}")
    wd = job.workdir
    per_req_s = job.ttft_ms / 1e3 + job.output_tokens * job.itl_ms / 1e3
    num_requests = max(job.streams, int(job.seconds * job.streams / max(per_req_s, 1e-3)))
    cfg: dict[str, Any] = {
        "api": {"type": "completion", "streaming": True},  # its random prompts are for completions only
        "data": {
            "type": "random",
            "input_distribution": {"min": 32, "max": 32, "mean": 32, "std_dev": 0},
            "output_distribution": {
                "min": job.output_tokens,
                "max": job.output_tokens,
                "mean": job.output_tokens,
                "std_dev": 0,
            },
        },
        "load": {
            "type": "concurrent",
            "stages": [{"num_requests": num_requests, "concurrency_level": job.streams}],
            # One worker process on the one client core, as loadgen gets (its default is one per host CPU).
            "num_workers": 1,
            "worker_max_concurrency": job.streams,
        },
        "server": {"type": "vllm", "model_name": "bench", "base_url": job.base_url, "ignore_eos": True},
        "tokenizer": {"pretrained_model_name_or_path": str(tokenizer_dir())},
        "storage": {"local_storage": {"path": str(wd / "out")}},
        "report": {"request_lifecycle": {"summary": True, "per_stage": False, "per_request": False}},
    }
    if job.rate:
        # Its "constant" load type: the rate's mean, gaps drawn from an exponential and scaled to the duration.
        in_flight = int(job.rate * per_req_s * 2) + 8
        cfg["load"] = {
            "type": "constant",
            "stages": [{"rate": job.rate, "duration": max(1, round(job.seconds))}],
            "num_workers": 1,
            "worker_max_concurrency": max(job.streams, in_flight),
        }
    if job.per_request:
        lifecycle = cfg["report"]["request_lifecycle"]
        lifecycle["per_request"] = True
        lifecycle["per_request_fields"] = {"response": False, "response_chunks": False, "computed_metrics": True}
        lifecycle["use_server_output_tokens"] = job.usage
    (wd / "config.yml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    cmd = [str(peer_bin(name)), "--config_file", str(wd / "config.yml")]
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cmd = job.cores.pin(job.cores.client, cmd)
    run = run_client(cmd, env=env, timeout=job.seconds * 4 + 180, cwd=wd, log=wd / "client.log", samples=job.samples)
    summaries = list((wd / "out").rglob("summary_lifecycle_metrics.json"))
    res = Result(name, ok=bool(summaries), run=run, cmd=cmd, outputs=summaries[0].parent if summaries else None)
    if not summaries:
        res.note = f"no summary (exit {run.returncode}): {run.output[-300:]}"
        return res
    s = orjson.loads(summaries[0].read_bytes())
    succ = s.get("successes", {})
    lat = succ.get("latency", {})

    def pct(metric: str, key: str) -> float:
        v = (lat.get(metric) or {}).get(key)
        return float(v) * 1e3 if v is not None else math.nan

    g = Grade(name, requests=int(succ.get("count", 0)))
    g.reported = {
        "ttft_p50": pct("time_to_first_token", "median"),
        "ttft_p99": pct("time_to_first_token", "p99"),
        "itl_p50": pct("inter_token_latency", "median"),
        "itl_p99": pct("inter_token_latency", "p99"),
    }
    res.grade = g
    return res


def run_aiperf(job: Job) -> Result:
    """NVIDIA AIPerf: `aiperf profile` with synthetic prompts, one worker process (its default is a share of the host's
    CPUs), no console UI and no server-metrics scraping (the bench server serves no /metrics)."""
    name = "aiperf"
    if not installed(name):
        return Result(name, ok=False, note=f"not installed: {INSTALL[name]}")
    wd = job.workdir
    art = wd / "artifacts"
    cmd = [str(peer_bin(name)), "profile", "--model", "bench", "--url", job.base_url, "--streaming"]
    cmd += ["--endpoint-type", "completions" if job.completions else "chat"]
    cmd += ["--isl", "32", "--isl-stddev", "0", "--osl", str(job.output_tokens), "--osl-stddev", "0"]
    cmd += ["--tokenizer", str(tokenizer_dir()), "--random-seed", "1", "--workers-max", "1"]
    cmd += ["--benchmark-duration", f"{job.seconds:g}", "--benchmark-grace-period", "30"]
    cmd += ["--ui", "none", "--no-server-metrics", "--artifact-dir", str(art)]
    if job.rate:
        cmd += ["--request-rate", f"{job.rate:g}", "--arrival-pattern", "constant"]
    else:
        cmd += ["--concurrency", str(job.streams)]
    if job.usage:  # its per-chunk usage (continuous_usage_stats) is for chat only
        cmd += ["--use-server-token-count", *(() if job.completions else ("--per-chunk-usage",))]
    # Not HF_HUB_OFFLINE: with it AIPerf 0.13 takes the tokenizer folder for a hub repo id and fails.
    cmd = job.cores.pin(job.cores.client, cmd)
    run = run_client(cmd, timeout=job.seconds * 4 + 180, cwd=wd, log=wd / "client.log", samples=job.samples)
    summary = art / "profile_export_aiperf.json"
    res = Result(name, ok=summary.exists(), run=run, cmd=cmd, outputs=art)
    if not res.ok:
        res.note = f"no summary (exit {run.returncode}): {run.output[-300:]}"
        return res
    from bench.peer_outputs import read_aiperf

    _, s = read_aiperf(art)
    res.grade = Grade(name, requests=s.requests, reported=dict(s.pcts))
    return res


def run_guidellm(job: Job) -> Result:
    from bench.guidellm_runner import run

    name = "guidellm"
    if not installed(name):
        return Result(name, ok=False, note=f"not installed: {INSTALL[name]}")
    return run(job, peer_bin(name), tokenizer_dir())


CLIENTS: dict[str, Callable[[Job], Result]] = {
    "loadgen": run_loadgen,
    "loadgen-py": lambda job: run_loadgen(job, pure_python=True),
    "fasthttp": run_fasthttp,
    "httpx": run_httpx,
    "inference-perf": run_inference_perf,
    "guidellm": run_guidellm,
    "aiperf": run_aiperf,
}
