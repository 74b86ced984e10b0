"""The request timeline: the sampled requests of each variant (measure/request_timeline.py) in the report JSON
(`request_timeline`), drawn in the HTML report as lanes, and as CSV (`loadgen report PATH --format timeline-csv`).

One lane per request, in send order: a thin line from its schedule to its send (open loop: time waiting for a free
sender, the client's queue), a bar from the send to its first token (the server's queue and prefill), a bar from the
first token to the end (decode), the inter-token gaps over the variant's ITL bound in red on it (stalls: a
preemption, a long prefill of another request batched in), a cross where a request failed, an open end where the
stop cut it. Times are seconds from the run's start. Static SVG: it draws with scripts off and needs no chart library.
"""

from __future__ import annotations

import csv
import html
import io
from typing import Any

from loadgen.config.scenario import Scenario
from loadgen.measure.request_timeline import SLOW_GAPS_KEPT, RequestTimelineSample, itl_bound_ms
from loadgen.report.numbers import counted

__all__ = ["CSV_COLUMNS", "render_timeline_csv", "timeline_html", "timeline_section"]

_WIDTH, _LEFT, _LANE, _TOP = 900, 8, 5, 18
_COLOURS = {"wait": "#9aa5b1", "ttft": "#e0a030", "decode": "#3b7dd8", "slow": "#d62728", "gap": "#555"}


def _rel(t: float | None, start: float) -> float | None:
    return None if t is None else round(t - start, 6)


def timeline_section(scenario: Scenario, sample: RequestTimelineSample, started_wall: float) -> dict[str, Any]:
    """The report's `request_timeline`: how it was sampled, and per variant its ITL bound and its rows (times in
    seconds from the run's start)."""
    variants = []
    for v in scenario.variants:
        rows = []
        for r in sample.rows(v.name):
            rows.append(
                {
                    "key": r["key"],
                    "mix": r["mix"],
                    **{k: _rel(r[k], started_wall) for k in ("scheduled", "sent", "first_token", "done")},
                    **{k: r[k] for k in ("outcome", "tokens", "chunks", "max_gap_ms", "slow_gaps", "gaps")},
                }
            )
        variants.append({"name": v.name, "itl_bound_ms": itl_bound_ms(scenario, v.name), "requests": rows})
    return {
        "method": {
            "cap_per_variant": sample.cap,
            "sampling": "bottom-k by a hash of (seed, the request's place in the seeded request stream): the same "
            "requests in every variant where they were sent, whatever the workers; warm-up requests excluded",
            "slow_gap": "a chunk gap whose per-token share (gap ÷ the chunk's tokens) is over itl_bound_ms; the "
            f"{SLOW_GAPS_KEPT} longest per request kept (without a bound: its 3 longest gaps, not judged)",
            "clock": "wall clock, seconds from the run's start",
        },
        "variants": variants,
    }


CSV_COLUMNS = (
    "variant", "key", "mix", "outcome", "scheduled_s", "sent_s", "first_token_s", "done_s", "queue_ms", "ttft_ms",
    "e2e_ms", "tokens", "chunks", "max_gap_ms", "itl_bound_ms", "slow_gaps", "slow_gap_ms",
)  # fmt: skip


def _ms(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round((b - a) * 1e3, 3)


def render_timeline_csv(report: dict[str, Any]) -> str:
    """One row per sampled request: its times from the run's start, its waits and latencies in ms, its gaps."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for v in (report.get("request_timeline") or {}).get("variants", []):
        bound = v.get("itl_bound_ms")
        for r in v["requests"]:
            slow = sum(g[1] for g in r["gaps"]) if bound is not None else 0.0
            row = [v["name"], r["key"], r["mix"], r["outcome"], r["scheduled"], r["sent"], r["first_token"], r["done"],
                   _ms(r["scheduled"], r["sent"]), _ms(r["sent"], r["first_token"]), _ms(r["sent"], r["done"]),
                   r["tokens"], r["chunks"], r["max_gap_ms"], bound, r["slow_gaps"], round(slow, 3)]  # fmt: skip
            w.writerow(["" if x is None else x for x in row])
    return out.getvalue()


def _x(t: float, t0: float, span: float) -> float:
    return round(_LEFT + (t - t0) / span * (_WIDTH - 2 * _LEFT), 2)


def _lane(r: dict[str, Any], y: float, t0: float, span: float, bound: float | None) -> str:
    sent, first, done = r["sent"], r["first_token"], r["done"]
    end = done if done is not None else (first if first is not None else sent)
    tip = html.escape(
        f"{r['key']} ({r['mix']}): {r['outcome']}; TTFT {_ms(sent, first)} ms, E2E {_ms(sent, done)} ms, "
        f"{r['tokens']} tokens, longest gap {r['max_gap_ms']} ms"
        + (f", {r['slow_gaps']} gaps over {bound:g} ms/token" if bound is not None else ""),
        quote=True,
    )
    h = _LANE - 1
    parts = [f"<g class=lane><title>{tip}</title>"]
    if r["scheduled"] is not None and sent - r["scheduled"] > 0:
        parts.append(
            f'<line x1="{_x(r["scheduled"], t0, span)}" x2="{_x(sent, t0, span)}" y1="{y + h / 2}" '
            f'y2="{y + h / 2}" stroke="{_COLOURS["wait"]}" stroke-width="1"/>'
        )
    ttft_end = first if first is not None else end
    parts.append(_rect(_x(sent, t0, span), _x(ttft_end, t0, span), y, h, _COLOURS["ttft"], "ttft"))
    if first is not None:
        parts.append(_rect(_x(first, t0, span), _x(end, t0, span), y, h, _COLOURS["decode"], "decode"))
    colour = _COLOURS["slow"] if bound is not None else _COLOURS["gap"]
    for start_ms, gap_ms, _ in r["gaps"]:
        a = sent + start_ms / 1e3
        parts.append(_rect(_x(a, t0, span), _x(a + gap_ms / 1e3, t0, span), y, h, colour, "gap"))
    if r["outcome"] not in ("ok", "cut_by_stop", "cancelled"):
        x = _x(end, t0, span)
        parts.append(f'<path class=failed d="M{x - 2} {y}l4 {h}m0 -{h}l-4 {h}" stroke="#000" stroke-width="1"/>')
    parts.append("</g>")
    return "".join(parts)


def _rect(x1: float, x2: float, y: float, h: float, colour: str, cls: str) -> str:
    return f'<rect class={cls} x="{x1}" y="{y}" width="{max(round(x2 - x1, 2), 0.6)}" height="{h}" fill="{colour}"/>'


def timeline_html(report: dict[str, Any]) -> str:
    """Each variant's sampled requests as lanes on one time axis (all variants share it, so they compare)."""
    section: dict[str, Any] = report.get("request_timeline") or {}
    rows = [r for v in section.get("variants", []) for r in v["requests"]]
    if not rows:
        return ""
    starts = [r["scheduled"] if r["scheduled"] is not None else r["sent"] for r in rows]
    ends = [max(x for x in (r["done"], r["first_token"], r["sent"]) if x is not None) for r in rows]
    t0, t1 = min(starts), max(ends)
    span = max(t1 - t0, 1e-3)
    legend = (
        f'<span style="color:{_COLOURS["wait"]}">━ waiting to be sent (open loop)</span> · '
        f'<span style="color:{_COLOURS["ttft"]}">■ sent → first token</span> · '
        f'<span style="color:{_COLOURS["decode"]}">■ first token → done</span> · '
        f'<span style="color:{_COLOURS["slow"]}">■ gap over the ITL bound</span> · ✕ failed'
    )
    out = [
        "<h2>Request timeline</h2>",
        f"<p class=meta>A seeded sample of each variant's requests ({section['method']['cap_per_variant']} at most; "
        f"the same requests in every variant), seconds {t0:.1f}–{t1:.1f} from the run's start. {legend}. "
        "Hover a lane for its figures; <code>loadgen report … --format timeline-csv</code> gives them as CSV.</p>",
    ]
    for v in section["variants"]:
        reqs = v["requests"]
        if not reqs:
            continue
        bound = v.get("itl_bound_ms")
        height = _TOP + len(reqs) * _LANE + 4
        ticks = "".join(
            f'<text x="{_x(t0 + span * k / 4, t0, span)}" y="12" font-size="10" text-anchor="middle">'
            f"{t0 + span * k / 4:.1f} s</text>"
            for k in range(5)
        )
        lanes = "".join(_lane(r, _TOP + i * _LANE, t0, span, bound) for i, r in enumerate(reqs))
        judged = f"gaps judged against {bound:g} ms per token" if bound is not None else "no ITL bound: longest gaps"
        slow = sum(1 for r in reqs if r["slow_gaps"])
        out.append(
            f"<h3>{html.escape(v['name'])}</h3><p class=meta>{counted(len(reqs), 'request')} · {judged}"
            + (f" · {slow} with a gap over it" if bound is not None else "")
            + "</p>"
            f'<svg class=request-timeline data-variant="{html.escape(v["name"], quote=True)}" '
            f'viewBox="0 0 {_WIDTH} {height}" width="100%" style="max-width:{_WIDTH}px" role="img" '
            f'aria-label="request timeline of {html.escape(v["name"], quote=True)}">{ticks}{lanes}</svg>'
        )
    return "".join(out)
