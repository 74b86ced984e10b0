"""Each tool's own output files, read into one shape: per request, what the tool measured and counted.

The comparison grades every tool from the files it writes for its users, never from our own re-timing:

- loadgen: its raw record shards (`--raw-records`: `records-*.jsonl`, one request a line with its chunk arrival times
  and tokens per chunk) and `report.json` (its summary percentiles).
- AIPerf: `profile_export.jsonl` (one record a line: metadata with the `X-Request-ID` it sent, metrics with TTFT, its
  per-request ITL and the inter-chunk gaps) and `profile_export_aiperf.json` (its summary).
- inference-perf: `per_request_lifecycle_metrics.json` (a list: the request body it sent, the chunk arrival times,
  its computed metrics in seconds) and `summary_lifecycle_metrics.json`.
- GuideLLM: `benchmarks.json` (its per-request stats: the request body, TTFT and a per-request ITL in ms; no per-chunk
  times) and the same file's distribution summaries.

A request is matched to the server's truth log by the id the tool sent (`X-Request-ID`: loadgen, AIPerf) or, for tools
that send none, by the fingerprint of its prompt text (`bench.server.prompt_key`), which the truth log's arrival
carries. tests/unit/test_bench_peer_outputs.py reads captured outputs of each tool (tests/fixtures/peers/).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.server import prompt_key

__all__ = [
    "PeerRequest",
    "PeerSummary",
    "read_aiperf",
    "read_guidellm",
    "read_inference_perf",
    "read_loadgen",
    "READERS",
]


@dataclass
class PeerRequest:
    """One request as the tool recorded it (ms; token counts as the tool counted them)."""

    match: str  # the truth log's request id ("rid:…") or its prompt fingerprint ("key:…")
    ok: bool
    ttft_ms: float | None = None
    itl_ms: float | None = None  # the tool's own per-request ITL (each tool defines it its way)
    chunk_gaps_ms: list[float] | None = None  # gaps between content chunks as the tool timed them; None: not kept
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass
class PeerSummary:
    """The tool's own summary percentiles (ms) and its count of successful requests."""

    requests: int = 0
    pcts: dict[str, float] = field(default_factory=dict)  # ttft_p50, ttft_p99, itl_p50, itl_p99


def _num(v: Any, scale: float = 1.0) -> float | None:
    return float(v) * scale if isinstance(v, int | float) and not isinstance(v, bool) else None


def _int(v: Any) -> int | None:
    return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _gaps(times: list[float], scale: float = 1e3) -> list[float]:
    return [(b - a) * scale for a, b in zip(times, times[1:], strict=False)]


# ---- loadgen ------------------------------------------------------------------------------------------------------


def read_loadgen(raw_dir: Path, report: Path) -> tuple[list[PeerRequest], PeerSummary]:
    out = []
    for shard in sorted(raw_dir.glob("records-*.jsonl")):
        for line in shard.read_bytes().splitlines():
            if not line.strip():
                continue
            r = orjson.loads(line)
            if r.get("warmup"):
                continue
            c, k = r.get("chunk_times") or [], r.get("chunk_tokens") or []
            ok = r.get("error") is None and bool(c)
            req = PeerRequest(f"rid:{r['id']}", ok, input_tokens=r.get("prompt_tokens"), output_tokens=sum(k) or None)
            if ok:
                req.ttft_ms = (c[0] - r["sent"]) * 1e3
                req.chunk_gaps_ms = _gaps(c)
                after_first = sum(k) - k[0]
                req.itl_ms = (c[-1] - c[0]) * 1e3 / after_first if after_first > 0 else None
            out.append(req)
    doc = orjson.loads(report.read_bytes())
    overall = doc["variants"][0]["overall"]
    m = overall.get("metrics_ms", {})
    pcts = {f"{name}_{p}": float(m[name][p]) for name in ("ttft", "itl") for p in ("p50", "p99") if name in m}
    return out, PeerSummary(int(overall.get("ok", 0)), pcts)


# ---- AIPerf -------------------------------------------------------------------------------------------------------


def read_aiperf(artifacts: Path) -> tuple[list[PeerRequest], PeerSummary]:
    out = []
    for line in (artifacts / "profile_export.jsonl").read_bytes().splitlines():
        if not line.strip():
            continue
        rec = orjson.loads(line)
        meta, metrics = rec.get("metadata") or {}, rec.get("metrics") or {}
        if meta.get("benchmark_phase", "profiling") != "profiling":
            continue

        def value(name: str, metrics: dict[str, Any] = metrics) -> Any:
            m = metrics.get(name)
            return m.get("value") if isinstance(m, dict) else None

        icl = value("inter_chunk_latency")
        out.append(
            PeerRequest(
                f"rid:{meta.get('x_request_id')}",
                ok=rec.get("error") is None and value("time_to_first_token") is not None,
                ttft_ms=_num(value("time_to_first_token")),
                itl_ms=_num(value("inter_token_latency")),
                chunk_gaps_ms=[float(g) for g in icl] if isinstance(icl, list) else None,
                input_tokens=_int(value("input_sequence_length")),
                output_tokens=_int(value("output_sequence_length")),
            )
        )
    summary = orjson.loads((artifacts / "profile_export_aiperf.json").read_bytes())
    pcts = {}
    for name, metric in (("ttft", "time_to_first_token"), ("itl", "inter_token_latency")):
        for p in ("p50", "p99"):
            v = _num((summary.get(metric) or {}).get(p))
            if v is not None:
                pcts[f"{name}_{p}"] = v
    count = _int((summary.get("request_count") or {}).get("avg")) or 0
    return out, PeerSummary(count, pcts)


# ---- inference-perf -----------------------------------------------------------------------------------------------


def read_inference_perf(out_dir: Path) -> tuple[list[PeerRequest], PeerSummary]:
    out = []
    for e in orjson.loads((out_dir / "per_request_lifecycle_metrics.json").read_bytes()):
        body = e.get("request")
        body = orjson.loads(body) if isinstance(body, str) and body else body or {}
        prompt = body.get("prompt") if isinstance(body, dict) else None
        info = e.get("info") or {}
        resp = info.get("response_metrics") or {}
        cm = e.get("computed_metrics") or {}
        times = resp.get("chunk_times") if isinstance(resp, dict) else None
        req = PeerRequest(
            f"key:{prompt_key(prompt)}" if isinstance(prompt, str) else "key:?",
            ok=e.get("error") is None and cm.get("time_to_first_token") is not None,
            ttft_ms=_num(cm.get("time_to_first_token"), 1e3),
            itl_ms=_num(cm.get("inter_token_latency"), 1e3),
            chunk_gaps_ms=_gaps(times) if isinstance(times, list) else None,
            input_tokens=_int(((info.get("request_metrics") or {}).get("text") or {}).get("input_tokens")),
            output_tokens=_int(cm.get("output_tokens", resp.get("output_tokens") if isinstance(resp, dict) else None)),
        )
        out.append(req)
    s = orjson.loads((out_dir / "summary_lifecycle_metrics.json").read_bytes())
    succ = s.get("successes") or {}
    lat = succ.get("latency") or {}
    pcts = {}
    for name, metric in (("ttft", "time_to_first_token"), ("itl", "inter_token_latency")):
        for p, key in (("p50", "median"), ("p99", "p99")):
            v = _num((lat.get(metric) or {}).get(key), 1e3)
            if v is not None:
                pcts[f"{name}_{p}"] = v
    return out, PeerSummary(_int(succ.get("count")) or 0, pcts)


# ---- GuideLLM -----------------------------------------------------------------------------------------------------


def _guidellm_prompt(stats: dict[str, Any]) -> str | None:
    args = stats.get("request_args")
    args = orjson.loads(args) if isinstance(args, str) and args else args or {}
    body = args.get("body") if isinstance(args, dict) else None
    prompt = body.get("prompt") if isinstance(body, dict) else None
    return prompt if isinstance(prompt, str) else None


def read_guidellm(benchmarks: Path) -> tuple[list[PeerRequest], PeerSummary]:
    doc = orjson.loads(benchmarks.read_bytes())
    bench = (doc.get("benchmarks") or [{}])[0]
    requests = bench.get("requests") or {}
    out = []
    for kind in ("successful", "errored", "incomplete"):
        for st in requests.get(kind) or []:
            prompt = _guidellm_prompt(st)
            out.append(
                PeerRequest(
                    f"key:{prompt_key(prompt)}" if prompt is not None else "key:?",
                    ok=kind == "successful",
                    ttft_ms=_num(st.get("time_to_first_token_ms")),
                    itl_ms=_num(st.get("inter_token_latency_ms")),
                    chunk_gaps_ms=None,  # GuideLLM keeps the first and last token times and a count, not each chunk
                    input_tokens=_int(st.get("prompt_tokens")),
                    output_tokens=_int(st.get("output_tokens")),
                )
            )
    metrics = bench.get("metrics") or {}
    pcts = {}
    for name, metric in (("ttft", "time_to_first_token_ms"), ("itl", "inter_token_latency_ms")):
        dist = (metrics.get(metric) or {}).get("successful") or {}
        for p in ("p50", "p99"):
            v = _num((dist.get("percentiles") or {}).get(p))
            if v is not None and not math.isnan(v):
                pcts[f"{name}_{p}"] = v
    totals = metrics.get("request_totals") or {}
    return out, PeerSummary(_int(totals.get("successful")) or 0, pcts)


READERS = {"aiperf": read_aiperf, "inference-perf": read_inference_perf, "guidellm": read_guidellm}
