"""The master's scraping of a variant's own /metrics, one greenlet per variant (never one per worker: llama.cpp's
throughput gauges reset on every read): through the variant's URL, or pod by pod when a `PodSource` lists its ready
pods (loadgen/k8s/pod_metrics.py), every pod read at the same moment each interval and the list read again every
`RELIST_S`. Runs under gevent (the Locust master).
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Protocol

from loadgen.live.server_metrics import ServerTimeline, Values, parse_metrics

__all__ = ["RELIST_S", "SCRAPE_TIMEOUT_S", "PodSource", "fetch", "scrape_loop"]

SCRAPE_TIMEOUT_S = 2.0
RELIST_S = 30.0  # pods come and go (a rollout, an autoscaler): the list is read again this often


class PodSource(Protocol):
    """Where a variant's pods are: ``urls()`` lists the /metrics URL of each ready pod (raises when it cannot)."""

    def urls(self) -> list[str]: ...

    def describe(self) -> str: ...


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=SCRAPE_TIMEOUT_S) as r:  # noqa: S310 (the scenario's own server)
        return bytes(r.read())


def _one(tl: ServerTimeline, fetch_: Callable[[str], bytes]) -> bool:
    """One read of the variant's one URL; False when the variant is to be skipped from now on (a note says why). A
    server without /metrics (an HTTP error, or nothing loadgen knows in it) on the first read is skipped; later
    failures are counted."""
    started = time.time()
    try:
        kind, values = parse_metrics(fetch_(tl.url).decode("utf-8", "replace"))
    except urllib.error.HTTPError as e:
        if not tl.samples:
            tl.note = f"no /metrics at {tl.url} (HTTP {e.code}): server metrics skipped"
            return False
        tl.failures += 1
    except (OSError, ValueError) as e:  # unreachable, timed out, or not a Prometheus exposition
        if not tl.samples and tl.failures >= 2:
            tl.note = f"/metrics at {tl.url} unreadable ({e}): server metrics skipped"
            return False
        tl.failures += 1
    else:
        if kind is None and not tl.samples:
            tl.note = f"{tl.url} exports none of the server metrics loadgen knows: skipped"
            return False
        tl.add(started, kind, values)
        if tl.several_replicas():
            return False  # what it reads from now on mixes pods: the report says so, and no more is asked
    return True


def _pods_round(tl: ServerTimeline, urls: list[str], fetch_: Callable[[str], bytes]) -> bool:
    """Every pod at once; False when none answered (the caller falls back to the variant's URL)."""
    import gevent

    started = time.time()
    results: dict[str, tuple[str | None, Values] | None] = {}

    def read(url: str) -> None:
        try:
            results[url] = parse_metrics(fetch_(url).decode("utf-8", "replace"))
        except (OSError, ValueError):
            results[url] = None

    gevent.joinall([gevent.spawn(read, u) for u in urls], timeout=SCRAPE_TIMEOUT_S + 1)
    answered = {u: r for u, r in results.items() if r is not None}
    if not answered and not tl.samples:
        return False
    kinds = [r[0] for r in answered.values() if r[0] is not None]
    per_pod: dict[str, Values | None] = {u: (r[1] if (r := results.get(u)) is not None else None) for u in urls}
    tl.failures += sum(1 for v in per_pod.values() if v is None)
    tl.add_round(started, kinds[0] if kinds else None, per_pod)
    return True


def scrape_loop(
    tl: ServerTimeline,
    every: float,
    pods: PodSource | None = None,
    fetch_: Callable[[str], bytes] = fetch,
) -> None:
    """Read one variant's /metrics every `every` s until killed: pod by pod while ``pods`` lists them, else through
    ``tl.url``. A pod list that cannot be read, or pods none of which answer at first, fall back to the URL, with a
    note saying why."""
    import gevent

    due = time.monotonic()
    urls: list[str] = []
    listed_at = float("-inf")
    while True:
        if pods is not None and (not urls or time.monotonic() - listed_at >= RELIST_S):
            try:
                urls, listed_at = pods.urls(), time.monotonic()
                tl.scope = "pods"
            except Exception as e:  # noqa: BLE001 - no access, no cluster, an API error: the URL still works
                if not tl.samples:
                    tl.note = f"could not list the pods of {pods.describe()} ({_short(e)}): scraped through {tl.url}"
                    pods, tl.scope = None, "service"
                else:
                    listed_at = time.monotonic()  # keep the last list; try again later
        if pods is not None and urls:
            if not _pods_round(tl, urls, fetch_):
                tl.note = (
                    f"none of the {len(urls)} pods of {pods.describe()} answered on /metrics: scraped through {tl.url}"
                )
                pods, tl.scope = None, "service"
                continue
        elif pods is None and not _one(tl, fetch_):
            return
        due += every
        gevent.sleep(max(0.0, due - time.monotonic()))


def _short(e: Exception) -> str:
    reason = getattr(e, "reason", None)
    status = getattr(e, "status", None)
    text = f"HTTP {status} {reason}" if status and reason else str(e) or type(e).__name__
    return " ".join(text.split())[:160]
