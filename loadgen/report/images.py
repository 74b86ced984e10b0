"""TTFT by image count: the requests of each mix that carries images (`images` of a mix), per variant, by how many
images they carried (0 for those outside the mix's share). An image costs a vision model prefill in proportion to
its size, so TTFT should grow with the count; `mean_prompt_tokens` is the server's count, images included."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loadgen.measure.aggregate import Aggregate
from loadgen.measure.slices import BucketStats
from loadgen.report.numbers import figure, stat_ms

__all__ = ["image_lines", "images_json"]


def images_json(
    agg: Aggregate, variant: str, mix: str, bucket_json: Callable[[BucketStats], dict[str, Any]]
) -> dict[str, Any]:
    """`{"images": {count (a string: JSON keys): that count's requests as a bucket}}` for a mix with images; {} for
    one without (so the mix's entry has no `images` key)."""
    rows = {str(n): bucket_json(s) for (v, m, n), s in sorted(agg.images.items()) if v == variant and m == mix}
    return {"images": rows} if rows else {}


def image_lines(report: dict[str, Any]) -> list[str]:
    """The Markdown table of TTFT (and E2E) by image count, where a mix carried images."""
    rows = []
    for v in report["variants"]:
        for mix, g in v["mixes"].items():
            for n, s in (g.get("images") or {}).items():
                t, e = s.get("ttft_ms", {}), s.get("e2e_ms", {})
                rows.append(
                    f"| {v['name']} | {mix} | {n} | {s['requests']:,} | {s['ok']:,} "
                    f"| {figure(s['mean_prompt_tokens'], 1)} | {stat_ms(t, 'p50')} | {stat_ms(t, 'p99')} "
                    f"| {stat_ms(e, 'p50')} | {stat_ms(e, 'p99')} |"
                )
    if not rows:
        return []
    return [
        "",
        "## TTFT by image count (ms)",
        "",
        "| variant | mix | images | requests | ok | mean prompt tokens | TTFT p50 | TTFT p99 | E2E p50 | E2E p99 |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *rows,
        "",
        "Each image costs the server prefill in proportion to its size (mean prompt tokens is the server's count, its "
        "images included), so TTFT should grow with the count; 0: the mix's requests outside its images' share.",
    ]
