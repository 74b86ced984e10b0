"""The client's TTFT split by the server's own view (`variants[].latency_split`): network + client, server queue,
and prefill, as means over the measured window.

The server's parts come from its request-time histograms (`server_metrics.request_times`: vLLM's
`request_queue_time_seconds`, `request_prefill_time_seconds` and `time_to_first_token_seconds`; TGI's
`tgi_request_queue_duration`; SGLang's TTFT), their _sum ÷ _count over the scrapes of the window. vLLM's prefill
time runs from the scheduler's admission to the first token, its queue time from arrival to admission, so queue +
prefill is the server's TTFT; without a TTFT histogram that sum stands for it. What the client saw beyond the
server's TTFT is network + client (the request's way in, the first token's way out, the load generator's parsing):
the client's mean TTFT (successful requests, `overall.metrics.ttft.mean`) minus the server's.

Means, not percentiles: a mean adds up across parts, percentiles do not; and vLLM's queue / prefill buckets begin at
0.3 s, too coarse for a sound p50 of sub-second parts. The server counts a request when it finishes, the client when
it completes in the window: over a window of steady load the two sets of requests are the same but for its edges.
"""

from __future__ import annotations

from typing import Any

__all__ = ["QUEUE_DOMINATES", "latency_split", "split_ttft"]

# The server's queue time dominates TTFT when it is at least this share of the client's mean TTFT.
QUEUE_DOMINATES = 0.5


def latency_split(variant: dict[str, Any]) -> dict[str, Any] | None:
    """The split of one report variant (None: its server exports none of the parts, or no TTFT was measured)."""
    times = (variant.get("server_metrics") or {}).get("request_times") or {}
    client = (((variant.get("overall") or {}).get("metrics_ms") or {}).get("ttft") or {}).get("mean")
    return split_ttft(client, times)


def split_ttft(client: float | None, times: dict[str, dict[str, float]]) -> dict[str, Any] | None:
    """The split of a client's mean TTFT (ms) by the server's mean request times (`ServerTimeline.request_times`):
    the report's and the live exporter's one rule."""
    queue, prefill, ttft = (times.get(p, {}).get("mean_ms") for p in ("queue", "prefill", "ttft"))
    if client is None or (queue is None and ttft is None):
        return None
    server_ttft = ttft if ttft is not None else (queue + prefill if queue is not None and prefill is not None else None)
    if prefill is None and server_ttft is not None and queue is not None:
        prefill = server_ttft - queue  # TGI: queue only, SGLang: TTFT only; with both, the rest is prefill
    out: dict[str, Any] = {
        "client_ttft_ms": client,
        "server_ttft_ms": server_ttft,
        "server_ttft_from": "ttft histogram" if ttft is not None else "queue + prefill",
        "network_client_ms": None if server_ttft is None else round(client - server_ttft, 3),
        "queue_ms": queue,
        "prefill_ms": None if prefill is None else round(prefill, 3),
        "decode_ms": times.get("decode", {}).get("mean_ms"),
        "server_requests": max((p.get("count", 0) for p in times.values()), default=0),
        "queue_share": None if queue is None or client <= 0 else round(queue / client, 4),
    }
    out["queue_dominated"] = None if out["queue_share"] is None else out["queue_share"] >= QUEUE_DOMINATES
    return out
