"""The per-request lists of the vLLM-bench export, read from raw record shards (`--raw-records DIR`).

`vllm bench serve --save-result` writes `latencies` and `queue_times` (seconds, one per request); with
`--save-detailed` also `input_lens`, `output_lens`, `start_times`, `ttfts`, `itls` (one list of chunk gaps per
request), `generated_texts` and `errors` (vllm/benchmarks/serve.py). One entry per request the benchmark sent, in the
order they went out, failures included: a failed request has output length 0, latency 0.0, its error text, and the
TTFT and gaps it got before it failed (0.0 and [] when none), as vLLM's request functions leave them.

loadgen's report keeps histograms, not every request, so the lists come only from raw shards. The requests listed
are those the export counts as `completed` or `failed`: sent inside the window (not in the warm-up) and ended by the
target (succeeded, failed, timed out, or drained after the window). Requests cut at the stop or given up by the
client (`traffic.cancel`) and open-loop arrivals never sent have no place in vLLM's lists; the export counts them
apart. Shards that do not hold the report's requests (another run's, or rows lost with a worker) are not used: the
lists are then absent, and the export says why rather than listing the wrong requests.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from loadgen.measure.fates import FATES, Fate, fate_of
from loadgen.measure.records import RequestRecord

__all__ = ["DETAILED_KEYS", "LIST_KEYS", "RESULT_LIST_KEYS", "detailed_lists", "listed_records", "per_request_note"]

# Written by `--save-result` whether or not `--save-detailed` is given.
RESULT_LIST_KEYS: tuple[str, ...] = ("latencies", "queue_times")
# Written by `--save-detailed` only, in vLLM's order.
DETAILED_KEYS: tuple[str, ...] = (
    "input_lens", "output_lens", "start_times", "ttfts", "itls", "generated_texts", "errors",
)  # fmt: skip
# Every list, in the order vLLM's result holds them.
LIST_KEYS: tuple[str, ...] = (
    "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times", "generated_texts",
    "errors",
)  # fmt: skip
# Raw records keep no reply text.
_NOT_IN_RECORDS = {"generated_texts": "raw records keep no reply text"}
NO_RECORDS = (
    "no raw records given: the report keeps histograms, not every request; run with --raw-records DIR and render "
    "with `loadgen report … --format vllm-bench --raw-records DIR` (or from the shards folder with --scenario)"
)


def _listed(rec: RequestRecord) -> bool:
    """Sent in the window and ended by the target (completed or failed in vLLM's terms): its fate's row
    (measure/fates.py) puts it in the window and in the success rate."""
    row = FATES[fate_of(rec)]
    return row.in_window and row.outcome != "neither" and row.fate is not Fate.NOT_SENT


def listed_records(rows: Iterable[dict[str, Any]], variant: str) -> list[RequestRecord]:
    """The variant's requests the lists hold, in the order they were sent."""
    recs = (RequestRecord.from_json(r) for r in rows if r.get("variant") == variant)
    return sorted((r for r in recs if _listed(r)), key=lambda r: (r.sent, r.request_id))


def _s(x: float) -> float:
    return round(x, 6)  # seconds to the microsecond: the clock's own resolution here


def detailed_lists(records: list[RequestRecord]) -> dict[str, list[Any]]:
    """vLLM's per-request lists (seconds, token counts, error texts) of `records`, one entry each."""
    out: dict[str, list[Any]] = {k: [] for k in LIST_KEYS if k not in _NOT_IN_RECORDS}
    for rec in records:
        ok = rec.ok
        out["input_lens"].append(rec.prompt_tokens if rec.prompt_tokens is not None else rec.prompt_tokens_target)
        out["output_lens"].append(rec.output_token_count if ok else 0)
        out["start_times"].append(_s(rec.sent))
        ttft = rec.ttft
        out["ttfts"].append(0.0 if ttft is None else _s(ttft))
        out["itls"].append([_s(g) for g in rec.icl_samples()])
        out["errors"].append("" if ok else f"{rec.error}: {rec.error_detail}" if rec.error_detail else str(rec.error))
        e2e = rec.e2e
        out["latencies"].append(_s(e2e) if ok and e2e is not None else 0.0)
        qd = rec.queue_delay  # open loop: the wait for a free sender; closed loop has none
        out["queue_times"].append(0.0 if qd is None else _s(max(qd, 0.0)))
    return out


def per_request_note(written: bool, count: int | None = None, why: str | None = None) -> dict[str, Any]:
    """`loadgen_per_request`: which of vLLM's per-request lists the object holds, from what, and why any is absent."""
    if written:
        return {
            "source": f"raw records: the {count:,} requests of the window completed or failed, in send order",
            "written": [k for k in LIST_KEYS if k not in _NOT_IN_RECORDS],
            "absent": dict(_NOT_IN_RECORDS),
        }
    return {"source": None, "written": [], "absent": dict.fromkeys(LIST_KEYS, why or NO_RECORDS)}
