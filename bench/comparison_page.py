"""docs/comparison.md ("How loadgen compares") from bench/results/peers.json: every figure on the page is that file's.

scripts/gen-docs.py writes the page with the reference pages and its `--check` (tests/unit/test_docs_generated.py)
fails when the page and the file disagree. A figure a tool cannot give (no per-chunk times, no option to count tokens
from the server) is said so in its cell, never filled in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

RESULTS = Path(__file__).resolve().parent / "results" / "peers.json"
TOOLS = ("loadgen", "guidellm", "inference-perf", "aiperf")
NAMES = {"loadgen": "loadgen", "guidellm": "GuideLLM", "inference-perf": "inference-perf", "aiperf": "AIPerf"}


def _ms(v: Any, digits: int = 2) -> str:
    return "—" if v is None else f"{v:,.{digits}f}"


def _n(v: Any) -> str:
    return "—" if v is None else f"{v:,.0f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return out + ["| " + " | ".join(r) + " |" for r in rows] + [""]


def _runs(doc: dict[str, Any], part: str) -> list[dict[str, Any]]:
    runs = [r for r in doc["results"]["runs"] if r["part"] == part]
    return sorted(runs, key=lambda r: (r["k"], not r["usage"], TOOLS.index(r["tool"]), r["streams"]))


def _chunk_cell(r: dict[str, Any]) -> str:
    if not r.get("chunk_timings_kept"):
        return "not kept by the tool"
    return _ms(r.get("chunk_gap_abs_err_per_token_p99"))


def _accuracy(doc: dict[str, Any]) -> list[str]:
    cond = doc["results"]["conditions"]
    lines = [
        "## Accuracy against the ground truth",
        "",
        f"Closed loop, {cond['streams']} streams, {cond['output_tokens']}-token replies at {cond['itl_ms']:g} ms per "
        f"token after {cond['ttft_ms']:g} ms, k tokens per chunk. *Added TTFT*: the tool's TTFT of a request minus "
        "the server's (first token written − request received), over the same requests. *ITL, reported − truth*: the "
        "tool's own ITL percentile minus the true per-token one. *Request ITL error*: the tool's per-request ITL "
        "against the truth's. *Chunk timing error*: per chunk, |tool's gap − server's gap| / k. *Server counts*: the "
        "tool counted tokens from the server's usage (where it has that option) rather than from the text.",
        "",
    ]
    header = ["k", "tool", "server counts", "added TTFT p50 / p99", "ITL reported − truth p50 / p99"]
    header += ["request ITL error p99", "chunk timing error p99", "CPU ms / request"]
    rows = []
    for r in _runs(doc, "fidelity"):
        name = NAMES[r["tool"]]
        usage = "yes" if r["usage"] else "no"
        if not r.get("ok"):
            rows.append([str(r["k"]), name, usage, "failed: " + (r.get("note") or "")[:80], "", "", "", ""])
            continue
        rmt = r.get("reported_minus_truth") or {}
        rows.append(
            [
                str(r["k"]),
                name,
                usage,
                f"{_ms(r.get('added_ttft_p50'))} / {_ms(r.get('added_ttft_p99'))}",
                f"{_ms(rmt.get('itl_p50'))} / {_ms(rmt.get('itl_p99'))}",
                _ms(r.get("request_itl_abs_err_p99")),
                _chunk_cell(r),
                _ms((r.get("cpu") or {}).get("ms_per_request")),
            ]
        )
    lines += _table(header, rows)
    no_option = [NAMES[t] for t, info in doc["results"]["tools"].items() if not info.get("usage_option")]
    if no_option:
        lines += [f"{', '.join(no_option)}: no option to count tokens from the text instead; one row per k.", ""]
    lines += ["What each tool calls ITL:", ""]
    lines += [f"- {NAMES[t]}: {info['itl_definition']}." for t, info in doc["results"]["tools"].items()]
    return [*lines, ""]


def _capacity(doc: dict[str, Any]) -> list[str]:
    cap = doc["results"].get("capacity")
    if not cap:
        return []
    cond = doc["results"]["conditions"]
    lines = [
        "## Throughput on one core while accurate",
        "",
        f"The same workload, each tool on one core, from {cond['streams']} streams up to "
        f"{', '.join(map(str, cond['ladder_up']))} while the tool's added TTFT p99 stays within "
        f"{cond['accurate_ttft_p99_ms']:g} ms, or down to {' and '.join(map(str, cond['ladder_down']))} until it does: "
        "the requests and chunks per second the server served at the highest step that stayed accurate, and the "
        "next step up, where it did not.",
        "",
    ]
    header = ["k", "tool", "accurate up to", "requests/s", "chunks/s", "tool CPU %", "first step past it"]
    rows = []
    for k in ("k1", "k4"):
        for t in TOOLS:
            c = (cap.get(t) or {}).get(k)
            if c is None:
                continue
            good, bad = c.get("accurate_up_to"), c.get("first_inaccurate")
            past = "—" if bad is None else f"{bad['streams']} streams: added TTFT p99 {_ms(bad['added_ttft_p99'])} ms"
            if good is None:
                rows.append([k[1:], NAMES[t], "not at any step", "—", "—", "—", past])
                continue
            rows.append(
                [
                    k[1:],
                    NAMES[t],
                    f"{good['streams']} streams",
                    _n(good["requests_per_s"]),
                    _n(good["chunks_per_s"]),
                    _n(good["cpu_percent"]),
                    past,
                ]
            )
    return lines + _table(header, rows)


def _parity(doc: dict[str, Any]) -> list[str]:
    lines = [
        "## Workload parity",
        "",
        "Tokens each tool counted against what the server read and wrote for the same requests (fidelity runs, k = 1, "
        "server counts where the tool has the option):",
        "",
    ]
    rows = []
    for r in _runs(doc, "fidelity"):
        if r["k"] != 1 or not r["usage"] or not r.get("ok"):
            continue
        p = r["parity"]
        rows.append(
            [
                NAMES[r["tool"]],
                f"{_n(p['prompt_tokens_tool'])} / {_n(p['prompt_tokens_server'])}",
                f"{_n(p['output_tokens_tool'])} / {_n(p['output_tokens_server'])}",
            ]
        )
    lines += _table(["tool", "prompt tokens: tool / server", "output tokens: tool / server"], rows)
    arr = [r for r in _runs(doc, "arrivals") if r.get("arrivals")]
    if arr:
        rate = doc["results"]["conditions"]["rate"]
        lines += [
            f"Open loop at a fixed {rate:g} requests/s (each tool's constant-rate mode): the arrivals the server saw "
            "in the steady state. A fixed rate means every gap is 1 / rate: coefficient of variation 0.",
            "",
        ]
        header = ["tool", "rate seen /s", "gap CV", "gap error p50 / p99 ms", "off its slot p99 ms"]
        rows = [
            [
                NAMES[r["tool"]],
                _ms(r["arrivals"].get("rate_seen"), 1),
                _ms(r["arrivals"].get("gap_cv"), 3),
                f"{_ms(r['arrivals'].get('gap_abs_err_ms_p50'))} / {_ms(r['arrivals'].get('gap_abs_err_ms_p99'))}",
                _ms(r["arrivals"].get("off_schedule_ms_p99"), 1),
            ]
            for r in arr
        ]
        lines += _table(header, rows)
    return lines


def _loadgen_capacity(doc: dict[str, Any]) -> list[str]:
    lc = doc["results"].get("loadgen_capacity")
    if not lc:
        return []
    lines = [
        "## loadgen's own ceiling on one core",
        "",
        f"The most loadgen sustained on one core while its event-loop lag p99 stayed under {lc['lag_bound_ms']:g} ms "
        "(`bench/capacity.py`): chunks/s with 256-token replies, requests/s with 16-token replies.",
        "",
    ]
    rows = []
    for k in ("k1", "k4"):
        b = lc["best"].get(k) or {}
        ch, rq = b.get("chunks"), b.get("requests")
        rows.append(
            [
                k[1:],
                _n(ch["chunks_s"]) if ch else "not reached",
                f"{ch['streams']} streams, {ch['itl_ms']:g} ms/token" if ch else "—",
                _n(rq["requests_s"]) if rq else "not reached",
                f"{rq['streams']} streams" if rq else "—",
            ]
        )
    return lines + _table(["k", "chunks/s", "at", "requests/s", "at"], rows)


def render(doc: dict[str, Any]) -> str:
    m, res = doc["machine"], doc["results"]
    la = res.get("load_average", {})
    lines = [
        "<!-- Generated by scripts/gen-docs.py from bench/results/peers.json; do not edit: run "
        "`python -m bench.peers`, then `python scripts/gen-docs.py`. -->",
        "# How loadgen compares",
        "",
        "loadgen, GuideLLM, inference-perf and NVIDIA AIPerf run the same workloads against a ground-truth streaming "
        "server (`bench/server.py`), which logs when it received each request and wrote each chunk. Each tool is "
        "graded from its own output files, request by request.",
        "",
        f"Measured {doc['measured']} on {m['cpu_model']} ({m['cores']} cores; server and tool pinned to one core "
        f"each), commit `{(m.get('commit') or '?')[:12]}`.",
        "",
    ]
    header = ["tool", "version", "counts tokens from the server with"]
    rows = [
        [NAMES[t], info["version"], info.get("usage_option") or "— (always asks)"] for t, info in res["tools"].items()
    ]
    lines += _table(header, rows)
    parts = "; ".join(
        f"{p} {v['start'][0]:.2f} → {v.get('end', ['?'])[0]} ({v.get('others_busy_cpus_at_start', '?')} CPUs busy "
        "with other work at its start)"
        for p, v in la.items()
    )
    lines += [
        f"1-minute load average at the start → end of each part (its end counts the part's own server and tool): "
        f"{parts}.",
        "",
    ]
    pm = res.get("parts_measured")
    if pm:
        each = "; ".join(
            f"{p} at `{(v.get('commit') or '?')[:12]}`" + (f", re-measured {v['at']}" if v.get("at") else "")
            for p, v in pm.items()
        )
        lines += [f"Parts measured: {each}.", ""]
    if not res.get("quiet", True):
        lines += [f'!!! warning "Not a quiet machine"\n    {res.get("note", "")}.', ""]
    lines += _accuracy(doc) + _capacity(doc) + _parity(doc) + _loadgen_capacity(doc)
    lines += [
        "## Reproduce",
        "",
        "```bash",
        "python -m bench.peers            # installs the pinned peers into .cache/peers, then every part",
        "python scripts/gen-docs.py       # this page from bench/results/peers.json",
        "```",
        "",
        "Each run's exact command and config file are in `bench/results/peers.json` (`runs[].cmd`, `runs[].config`).",
        "",
    ]
    return "\n".join(lines)


def page(results: Path = RESULTS) -> str:
    return render(orjson.loads(results.read_bytes()))
