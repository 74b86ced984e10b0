"""`loadgen report PATH --format vllm-bench`: each variant's results in the JSON shape `vllm bench serve
--save-result` writes, so that dashboards built on vLLM's benchmark files read loadgen's runs.

One JSON object per variant, one per line: the shape of `--append-result`, which appends one run's object per line
to a file (a reader of single-result files takes a line each). The keys are vLLM's (`VLLM_SUMMARY_KEYS`, then
`mean_/median_/std_/pNN_` of ttft, tpot, itl and e2el in milliseconds, pNN for every percentile loadgen reports);
`loadgen_note` says where the meaning differs:

- vLLM's ITL is the gap between streamed chunks (a chunk of several tokens is one gap), which is loadgen's ICL: the
  `itl` fields carry loadgen's ICL, not its per-token ITL.
- vLLM's latencies are over the successful requests; so are these, but TTFT is over every request that had a first
  token (one that failed mid-stream had one). loadgen's report itself ranks failed requests above every value
  instead: its own percentiles can be higher, or censored.
- TPOT is loadgen's: (last chunk − first chunk) ÷ the tokens after the first chunk; vLLM divides by the output
  tokens − 1. With one token per chunk they agree; with chunks of k tokens vLLM's is lower.
- Counts and rates are over loadgen's measured window (warm-up excluded): `duration` is the window. `failed` is the
  requests sent that failed; open-loop arrivals never sent (`not_sent`), requests cut at the stop and requests given
  up by the client are none of vLLM's outcomes and are counted apart (`loadgen_counted_apart`).
- The per-request lists (`latencies`, `queue_times`, and `--save-detailed`'s `input_lens`, `output_lens`,
  `start_times`, `ttfts`, `itls`, `errors`) come from raw record shards when they are given (vllm_bench_detail.py);
  without them, and always for `generated_texts` (raw records keep no reply text), `loadgen_per_request` names each
  list that is absent and why. `start_times` are the worker's monotonic seconds (one clock per host).
- `std_itl_ms` is the standard deviation of the report's ICL histogram (reports written before it kept one: of the
  raw records' chunk gaps, else null). `max_concurrent_requests` is null (loadgen does not track in-flight peaks;
  `max_concurrency` is the variant's own users or open-loop senders, its weight's share of `load.users`).
  `max_output_tokens_per_s` is the highest per-bin rate of the report's timeline.
"""

from __future__ import annotations

import datetime as _dt
import math
from typing import Any

import orjson

from loadgen.measure.group_stats import NOT_SENT
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.records import RequestRecord
from loadgen.report.vllm_bench_detail import detailed_lists, listed_records, per_request_note

__all__ = ["VLLM_SUMMARY_KEYS", "render_vllm_bench", "vllm_bench_results"]

# What `vllm bench serve --save-result` writes before its per-metric statistics (without --save-detailed, goodput
# or speculative decoding), in its order.
VLLM_SUMMARY_KEYS: tuple[str, ...] = (
    "date", "endpoint_type", "backend", "label", "model_id", "tokenizer_id", "num_prompts", "request_rate",
    "burstiness", "max_concurrency", "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
    "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
    "max_output_tokens_per_s", "max_concurrent_requests", "rtfx",
)  # fmt: skip
# vLLM's metric name ← loadgen's metric (the report's metrics_ms / hdr keys).
_METRICS = (("ttft", "ttft"), ("tpot", "tpot"), ("itl", "icl"), ("e2el", "e2e"))
_PERCENTILES = ("p50", "p90", "p95", "p99", "p99.9")
NOTE = (
    "written by loadgen from its report: the itl fields are loadgen's inter-chunk latency (ICL), which is what vLLM "
    "calls ITL (one gap per streamed chunk); latencies are over successful requests (TTFT over those with a first "
    "token); tpot is loadgen's, (last chunk - first chunk) / tokens after the first chunk (vLLM divides by output "
    "tokens - 1: they agree at one token per chunk); counts and rates over the "
    "measured window (duration, warm-up excluded); failed = requests sent that failed (arrivals never sent, cut at "
    "the stop or cancelled by the client: loadgen_counted_apart); per-request lists from raw records only "
    "(loadgen_per_request says which are absent and why); max_concurrent_requests is null (not kept); "
    "max_output_tokens_per_s is the highest per-bin rate of the report's timeline"
)


def _std_ms(h: LatencyHistogram) -> float | None:
    """Standard deviation (ms, population, as numpy's default that vLLM uses) over the histogram's buckets."""
    values, counts = h.buckets_us()
    n = sum(counts)
    if not n:
        return None
    mean = sum(v * c for v, c in zip(values, counts, strict=True)) / n
    return round(math.sqrt(sum(c * (v - mean) ** 2 for v, c in zip(values, counts, strict=True)) / n) / 1e3, 4)


def _pstd_ms(values: list[float]) -> float | None:
    """Population standard deviation (ms) of values in seconds."""
    if not values:
        return None
    mean = math.fsum(values) / len(values)
    return round(math.sqrt(math.fsum((x - mean) ** 2 for x in values) / len(values)) * 1e3, 4)


def _stats(
    overall: dict[str, Any], name: str, metric: str, records: list[RequestRecord] | None = None
) -> dict[str, float | None]:
    """mean / median / std / pNN in ms, uncensored (vLLM leaves failed requests out): from the report's histogram
    where it keeps one, else from its summary of a metric that is never censored (the std then from the raw
    records' values where they are given: ICL, the chunk gaps)."""
    blob = (overall.get("hdr") or {}).get(metric)
    out: dict[str, float | None] = {}
    if blob:
        h = LatencyHistogram.decode(blob)
        summary = h.summary_ms()
        std: float | None = _std_ms(h)
    else:
        summary = overall["metrics_ms"].get(metric) or {}
        if summary.get("censored"):
            summary = {}  # its statistics count failures: no success-only figure to give
        std = None
        if metric == "icl" and records is not None:
            std = _pstd_ms([g for r in records for g in r.icl_samples()])
    count = summary.get("count") or 0
    out[f"mean_{name}_ms"] = summary.get("mean") if count else None
    out[f"median_{name}_ms"] = summary.get("p50") if count else None
    out[f"std_{name}_ms"] = std if count else None
    for p in _PERCENTILES:
        out[f"{p}_{name}_ms"] = summary.get(p) if count else None
    return out


def _date(report: dict[str, Any]) -> str:
    try:
        return _dt.datetime.fromisoformat(str(report.get("generated_at"))).strftime("%Y%m%d-%H%M%S")
    except ValueError:
        return ""


def _records(v: dict[str, Any], rows: list[dict[str, Any]] | None) -> tuple[list[RequestRecord] | None, str | None]:
    """(the variant's listed records, None with why) — None unless the rows hold exactly the report's requests."""
    if rows is None:
        return None, None
    recs = listed_records(rows, v["name"])
    o = v["overall"]
    want = o["ok"] + _failed(o)
    if len(recs) != want:
        return None, (
            f"the raw records given hold {len(recs):,} requests of {v['name']} sent in the window and ended by the "
            f"target, the report {want:,}: not this report's shards (or rows lost with a worker), so no lists "
            "rather than the wrong ones"
        )
    return recs, None


def _failed(o: dict[str, Any]) -> int:
    """Requests sent that failed: the report's failures less the open-loop arrivals never sent."""
    return int(o["requests"] - o["ok"] - o["errors"].get(NOT_SENT, 0))


def _variant_result(report: dict[str, Any], v: dict[str, Any], rows: list[dict[str, Any]] | None) -> dict[str, Any]:
    o = v["overall"]
    records, why = _records(v, rows)
    run = report["run"]
    doc = report.get("scenario_doc") or {}
    load = doc.get("load") or {}
    arrival = load.get("arrival") or None
    open_loop = v.get("open_loop")
    window = run.get("window_s") or 0.0
    in_tok, out_tok = o.get("input_tokens_per_s"), o.get("output_tokens_per_s")
    peaks = [x for x in (v.get("timeline") or {}).get("output_tokens_per_s", []) if x is not None]
    goodput = o.get("goodput")
    result: dict[str, Any] = {
        "date": _date(report),
        "endpoint_type": v["dialect"],
        "backend": v["dialect"],
        "label": v["name"],
        "model_id": v["model"],
        "tokenizer_id": doc.get("tokenizer") or v["model"],
        "num_prompts": o["requests"],
        "request_rate": open_loop["requested_rate_per_s"] if open_loop else "inf",
        "burstiness": (arrival or {}).get("burstiness") or 1.0,
        "max_concurrency": (open_loop["senders"] if open_loop else (run.get("users_per_variant") or {}).get(v["name"])),
        "duration": window,
        "completed": o["ok"],
        "failed": _failed(o),
        "total_input_tokens": o["prompt_tokens"],
        "total_output_tokens": o["output_tokens"],
        "request_throughput": o.get("requests_per_s"),
        "request_goodput": goodput.get("per_s") if goodput else None,
        "output_throughput": out_tok,
        "total_token_throughput": None if in_tok is None or out_tok is None else round(in_tok + out_tok, 2),
        "max_output_tokens_per_s": max(peaks) if peaks else None,
        "max_concurrent_requests": None,
        "rtfx": 0.0,
    }
    if records is not None:
        result |= detailed_lists(records)
    for name, metric in _METRICS:
        result |= _stats(o, name, metric, records)
    result |= {
        "loadgen_note": NOTE,
        "loadgen_counted_apart": {
            "not_sent": o["errors"].get(NOT_SENT, 0),
            "cut_by_stop": o.get("cut_by_stop", 0),
            "cancelled": o.get("cancelled", 0),
        },
        "loadgen_per_request": per_request_note(records is not None, len(records or ()), why),
        "loadgen_scenario": report.get("scenario"),
        "loadgen_seed": report.get("seed"),
    }
    return result


def vllm_bench_results(report: dict[str, Any], rows: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """One vLLM-shaped result per variant of `report`, in the report's order. `rows`: the run's raw record shards'
    rows (csv_records.read_shards), for the per-request lists; None: none given (the lists are then absent)."""
    return [_variant_result(report, v, rows) for v in report["variants"]]


def render_vllm_bench(report: dict[str, Any], rows: list[dict[str, Any]] | None = None) -> str:
    return "".join(orjson.dumps(r).decode() + "\n" for r in vllm_bench_results(report, rows))
