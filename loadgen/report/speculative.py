"""Speculative decoding measured apart: per variant, how many tokens each chunk carried (`variants[].tokens_per_chunk`,
the client's view: a step of a speculating server streams 1 + its accepted drafts in one chunk), beside the server's
own acceptance (vLLM's `spec_decode_num_accepted_tokens` ÷ `spec_decode_num_draft_tokens`, and its mean acceptance
length 1 + accepted ÷ drafts, from `server_metrics.summary`) and the variant's TPOT speedup.

The chunks counted are those after each request's first (the first token comes out of the prefill step, alone),
of every request of the measured window, exactly (not sampled: measure/latency_samples.py counts them as records
arrive). A server that batches several steps into one chunk, or splits one, makes the client's mean differ from the
server's tokens per step: the table puts them side by side.
"""

from __future__ import annotations

from typing import Any

from loadgen.measure.latency_samples import LatencySamples
from loadgen.report.numbers import SHARE, percent

__all__ = ["SPEC_HEAD", "speculative_rows", "tokens_per_chunk"]

# A variant is shown when its chunks carry more than this many tokens on average, or its server reports speculation.
_SEVERAL = 1.05
# Chunk sizes shown one by one; larger ones are summed into the last bin ("≥ 8").
_SHOWN = 8

SPEC_HEAD = (
    "variant",
    "chunks",
    "tokens per chunk (client)",
    "tokens per step (server)",
    "acceptance (server)",
    "share of chunks with 1, 2, 3 … tokens",
    "TPOT p50 speedup",
)


def tokens_per_chunk(samples: LatencySamples, variant: str) -> dict[str, Any] | None:
    """The report's `variants[].tokens_per_chunk` (None: no request streamed more than one chunk)."""
    counts = samples.chunk_sizes.get(variant)
    chunks = sum(counts.values()) if counts else 0
    if not counts or not chunks:
        return None
    tokens = sum(k * c for k, c in counts.items())
    shown: dict[str, float] = {}
    for k in range(1, _SHOWN + 1):
        c = counts.get(k, 0) if k < _SHOWN else sum(c for n, c in counts.items() if n >= _SHOWN)
        if c:
            shown[str(k)] = round(c / chunks, 4)
    return {
        "chunks": chunks,
        "mean": round(tokens / chunks, 4),
        "empty": round(counts.get(0, 0) / chunks, 4),  # chunks that carried no token (counts from the server)
        "shares": shown,
    }


def speculative_rows(report: dict[str, Any]) -> list[list[str]]:
    """Rows of the speculative-decoding table (cell text): variants whose chunks carry several tokens on average, or
    whose server reports speculative acceptance."""
    rows = []
    for v in report.get("variants", []):
        tpc = v.get("tokens_per_chunk")
        summary = (v.get("server_metrics") or {}).get("summary") or {}
        acceptance, per_step = summary.get("spec_acceptance"), summary.get("spec_tokens_per_step")
        if not ((tpc and tpc["mean"] > _SEVERAL) or acceptance is not None):
            continue
        shares = " · ".join(
            f"{'≥' if k == str(_SHOWN) else ''}{k}: {percent(s, SHARE)}"
            for k, s in ((tpc or {}).get("shares") or {}).items()
        )
        speedup = (v.get("speedup_vs_baseline") or {}).get("tpot_p50")
        rows.append(
            [
                v["name"],
                "–" if not tpc else f"{tpc['chunks']:,}",
                "–" if not tpc else f"{tpc['mean']:.2f}",
                "–" if per_step is None else f"{per_step:.2f}",
                percent(acceptance, SHARE),
                shares or "–",
                "–" if speedup is None else f"{speedup:.2f}×",
            ]
        )
    return rows
