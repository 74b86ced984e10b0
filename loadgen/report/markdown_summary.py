"""The top of the Markdown report, what a CI log or a PR comment shows first: one line per variant with its verdict
and headline numbers, the breached SLOs in words (which SLO, where, measured against the threshold, how many
requests breached it), and goodput beside throughput when the scenario sets per-request SLOs."""

from __future__ import annotations

from typing import Any

from loadgen.report.numbers import REQ_PER_S, SHARE, counted, figure, in_percent, ms, percent, stat_ms
from loadgen.report.whole_replies import NOT_MEASURED

__all__ = ["cold_lines", "goodput_lines", "summary_lines"]


def _num(v: float | None, nd: int = REQ_PER_S) -> str:
    return figure(v, nd)


def _breach(s: dict[str, Any]) -> str:
    where = s["variant"] + (f"/{s['mix']}" if s.get("mix") else "") + (f" [{s['class']}]" if s.get("class") else "")
    if s.get("min_percent") is not None:  # a share: success rate, open-loop arrivals sent
        seen = s.get("observed_percent")
        measured = in_percent(seen, missing="no requests")
        errors = ", ".join(f"{k} {n}" for k, n in (s.get("errors") or {}).items())
        note = f" — {s['note']}" if s.get("note") else ""
        return f"{where}: {s['slo']} — measured {measured}" + (f" ({errors})" if errors else "") + note
    if s.get("censored"):
        measured = "censored (requests failed before reaching it)"
    elif s.get("observed_ms") is None:
        measured = "no data"
    else:
        measured = f"{ms(s['observed_ms'])} ms"
    over = s.get("breaching_requests")
    tail = f"; {counted(over, 'request')} over {s['max_ms']:g} ms" if over is not None else ""
    return f"{where}: {s['slo']} — measured {measured}{tail}"


def summary_lines(report: dict[str, Any]) -> list[str]:
    slos = report.get("slos", [])
    goodput = any("goodput" in v["overall"] for v in report["variants"])
    lines = ["", "## Summary", ""]
    head = "| variant | verdict | requests | success | req/s | " + ("goodput/s | " if goodput else "")
    head += "TTFT p50 / p99 ms | TPOT p50 ms | E2E p99 ms |"
    lines.append(head)
    lines.append("|---|---|---:|---:|---:|" + ("---:|" if goodput else "") + "---:|---:|---:|")
    for v in report["variants"]:
        g, m = v["overall"], v["overall"]["metrics_ms"]
        mine = [s for s in slos if s["variant"] == v["name"]]
        failed = sum(not s["passed"] for s in mine)
        verdict = "no SLOs" if not mine else ("SLOs met" if not failed else f"**{counted(failed, 'SLO')} breached**")
        success = percent(g.get("success_rate"))
        gp = f"{_num(g['goodput']['per_s'])} | " if goodput else ""
        base = " (baseline)" if v.get("baseline") and v["name"] != "baseline" else ""
        ttft = f"{stat_ms(m.get('ttft'), 'p50')} / {stat_ms(m.get('ttft'), 'p99')}"
        tpot = stat_ms(m.get("tpot"), "p50")
        if v.get("streamed") is False:  # whole replies (stream: false): nothing to time before the end
            ttft = tpot = NOT_MEASURED
        lines.append(
            f"| {v['name']}{base} | {verdict} | {g['requests']:,} | {success} | {_num(g.get('requests_per_s'))} | "
            f"{gp}{ttft} | {tpot} | {stat_ms(m.get('e2e'), 'p99')} |"
        )
    breached = [s for s in slos if not s["passed"]]
    target = report["run"].get("target_breaches") or []  # a dead target: a breach whatever the SLOs say
    if breached or target:
        lines += ["", "Breached:"]
        lines += [f"- the target: {r}" for r in target]
        lines += [f"- {_breach(s)}" for s in breached]
    crashed = report["run"].get("failed") or []
    if crashed:  # exit 4 over any other verdict: what crashed (or cut the run short) first
        lines += ["", "**Run failed** (exit 4): these figures are what it measured, and no verdict:"]
        lines += [f"- {r}" for r in crashed]
    if not report["run"]["trustworthy"]:
        lines += ["", "Not trustworthy" + ("" if crashed else " (exit 3)") + ":"]
        lines += [f"- {r}" for r in report["run"].get("untrustworthy_reasons", [])]
    return lines


def goodput_lines(report: dict[str, Any]) -> list[str]:
    """Goodput per variant and mix: requests/s that met every per-request SLO, beside throughput, and per bound how
    many successful requests missed it."""
    rows = [
        (v["name"], mix, g)
        for v in report["variants"]
        for mix, g in [("**all**", v["overall"]), *v["mixes"].items()]
        if "goodput" in g
    ]
    if not rows:
        return []
    bounds = (report.get("scenario_doc") or {}).get("goodput") or {}
    stated = ", ".join(f"{k.removesuffix('_ms')} ≤ {v:g} ms" for k, v in bounds.items() if v is not None)
    metrics = sorted({k for _, _, g in rows for k in g["goodput"]["missed"]})
    lines = ["", "## Goodput" + (f" ({stated}, per request)" if stated else ""), ""]
    lines.append(
        "| variant | mix | goodput req/s | throughput req/s | good share | "
        + "".join(f"missed {m} | " for m in metrics)
    )
    lines.append("|---|---|---:|---:|---:|" + "---:|" * len(metrics))
    for name, mix, g in rows:
        gp = g["goodput"]
        share = percent(gp["share"], SHARE)
        missed = "".join(f"{gp['missed'].get(m, 0):,} | " for m in metrics)
        lines.append(f"| {name} | {mix} | {_num(gp['per_s'])} | {_num(g.get('requests_per_s'))} | {share} | {missed}")
    lines += [
        "",
        "A request is good when it succeeded with at least one token and met every bound (`no_tokens`: a successful "
        "reply that carried none); failed requests are never good. Throughput counts every successful request.",
    ]
    return lines


_STATES = (
    ("warm", "warm (steady state)"),
    ("first", "cold: the variant's first on a worker"),
    ("idle", "cold: after an idle gap"),
    ("new_connection", "cold: new connection"),
)


def cold_lines(report: dict[str, Any]) -> list[str]:
    """Cold requests (scale-to-zero wake-ups, connection set-up, a variant's first) apart from the warm."""
    rows = [(v["name"], v.get("starts") or {}) for v in report["variants"]]
    if not any(starts for _, starts in rows):
        return []
    gap = ((report.get("scenario_doc") or {}).get("cold_starts") or {}).get("idle_gap")
    lines = ["", "## Cold vs warm requests", ""]
    lines.append("| variant | requests | ok | TTFT p50 ms | TTFT p99 ms | E2E p50 ms | E2E p99 ms |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for name, starts in rows:
        for state, label in _STATES:
            b = starts.get(state)
            if not b:
                continue
            t, e = b.get("ttft_ms", {}), b.get("e2e_ms", {})
            lines.append(
                f"| {name} — {label} | {b['requests']:,} | {b['ok']:,} | {stat_ms(t, 'p50')} | {stat_ms(t, 'p99')} | "
                f"{stat_ms(e, 'p50')} | {stat_ms(e, 'p99')} |"
            )
    lines += [
        "",
        "Every request is in the overall figures; this splits them: a request is cold when it is its variant's "
        "first on its worker, the first after the variant sat idle there (nothing of it in flight)"
        + (f" longer than {gap:g} s" if gap is not None else "")
        + " (a scale-to-zero deployment may have gone to sleep), or one that opened a new connection.",
    ]
    return lines
