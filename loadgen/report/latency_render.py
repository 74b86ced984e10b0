"""The "Why latency is what it is" section of the Markdown and HTML reports: per variant, the latency fit
(`variants[].latency_fit`, report/latency_fit.py) and the server's split of TTFT (`variants[].latency_split`,
report/server_split.py), with the variants whose TTFT queueing dominates called out; then speculative decoding
measured apart (report/speculative.py: tokens per chunk beside the server's acceptance and the TPOT speedup)."""

from __future__ import annotations

import html
from typing import Any

from loadgen.report.numbers import SHARE, ms, percent
from loadgen.report.speculative import SPEC_HEAD, speculative_rows

__all__ = ["latency_html", "latency_lines"]

_FIT_HEAD = (
    "variant",
    "requests",
    "a (ms)",
    "b (ms/token)",
    "b_c cached (ms/token)",
    "q (ms/request in flight)",
    "TTFT residual sd (ms)",
    "TPOT (ms)",
    "E2E residual sd (ms)",
)
_SPLIT_HEAD = (
    "variant",
    "client TTFT mean (ms)",
    "network + client (ms)",
    "server queue (ms)",
    "prefill (ms)",
    "decode (ms)",
    "queue share",
)
_MODEL = (
    "TTFT ≈ a + b · uncached prompt tokens [+ b_c · cached] [+ q · requests in flight], "
    "E2E ≈ TTFT + TPOT · (tokens after the first chunk)."
)
_SPLIT_NOTE = (
    "Means over the measured window: the server's from its own request-time histograms (_sum ÷ _count), "
    "network + client the client's mean TTFT minus the server's."
)

_SPEC_NOTE = (
    "Tokens per chunk: the client's, over every chunk after a request's first in the window. Tokens per step and "
    "acceptance: the server's own (vLLM's spec_decode counters: 1 + accepted ÷ drafts, accepted ÷ draft tokens)."
)


def _f(v: Any, nd: int = 1) -> str:
    return "–" if v is None else f"{v:,.{nd}f}"


def _ci(x: dict[str, float] | None, nd: int) -> str:
    if not x:
        return "–"
    return f"{x['value']:.{nd}f} ({x['ci_low']:.{nd}f}–{x['ci_high']:.{nd}f})"


def _rows(report: dict[str, Any]) -> tuple[list[list[str]], list[list[str]], list[str], str]:
    """(fit rows, split rows, call-outs, the fit's method) as cell text."""
    fits, splits, notes, method = [], [], [], ""
    for v in report.get("variants", []):
        fit = v.get("latency_fit")
        if fit:
            method = fit["method"]
            t, e = fit["ttft"], fit.get("e2e") or {}
            fits.append(
                [
                    v["name"],
                    str(fit["n"]),
                    _ci(t["intercept_ms"], 2),
                    _ci(t["prefill_ms_per_token"], 4),
                    _ci(t.get("cached_ms_per_token"), 4),
                    _ci(t.get("ms_per_request_in_flight"), 3),
                    _f(t["residual_sd_ms"], 2),
                    _ci(e.get("tpot_ms"), 3),
                    _f(e.get("residual_sd_ms"), 1),
                ]
            )
            if (fit.get("queueing") or {}).get("dominated"):
                notes.append(f"{v['name']}: {fit['queueing']['why']}.")
        s = v.get("latency_split")
        if s:
            share = percent(s["queue_share"], SHARE)
            means = ("client_ttft_ms", "network_client_ms", "queue_ms", "prefill_ms", "decode_ms")
            splits.append([v["name"], *(ms(s[k]) for k in means), share])
            if s.get("queue_dominated"):
                notes.append(
                    f"{v['name']}: the server's queue time is {share} of the mean TTFT: TTFT is dominated by queueing."
                )
    return fits, splits, notes, method


def _md_table(head: tuple[str, ...], rows: list[list[str]]) -> list[str]:
    return [
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def latency_lines(report: dict[str, Any]) -> list[str]:
    """The Markdown section (no lines when no variant has a fit, a split or speculation to show)."""
    fits, splits, notes, method = _rows(report)
    spec = speculative_rows(report)
    if not fits and not splits and not spec:
        return []
    out = ["", "## Why latency is what it is", ""]
    if fits:
        out += [_MODEL, "", *_md_table(_FIT_HEAD, fits), "", f"{method}. – : not in the fit (no cached tokens "
                "reported, or a load that did not vary)."]  # fmt: skip
    if splits:
        out += ["", *_md_table(_SPLIT_HEAD, splits), "", _SPLIT_NOTE]
    out += [""] + [f"- ⚠ {n}" for n in notes] if notes else []
    if spec:
        out += ["", "### Speculative decoding", "", *_md_table(SPEC_HEAD, spec), "", _SPEC_NOTE]
    return out


def _html_table(head: tuple[str, ...], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    trs = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>"


def latency_html(report: dict[str, Any]) -> str:
    """The HTML section (empty when no variant has a fit, a split or speculation to show)."""
    fits, splits, notes, method = _rows(report)
    spec = speculative_rows(report)
    if not fits and not splits and not spec:
        return ""
    out = ["<h2>Why latency is what it is</h2>"]
    if fits:
        out += [f"<p>{html.escape(_MODEL)}</p>", _html_table(_FIT_HEAD, fits), f"<p class=meta>{html.escape(method)}."
                " – : not in the fit (no cached tokens reported, or a load that did not vary).</p>"]  # fmt: skip
    if splits:
        out += [_html_table(_SPLIT_HEAD, splits), f"<p class=meta>{html.escape(_SPLIT_NOTE)}</p>"]
    if notes:
        out.append("<ul>" + "".join(f"<li>⚠ {html.escape(n)}</li>" for n in notes) + "</ul>")
    if spec:
        out += [
            "<h3>Speculative decoding</h3>",
            _html_table(SPEC_HEAD, spec),
            f"<p class=meta>{html.escape(_SPEC_NOTE)}</p>",
        ]
    return "".join(out)
