"""The Markdown rendering of a canonical JSON report: for CI logs, PR comments and `loadgen report`."""

from __future__ import annotations

from typing import Any

from loadgen.report.adapters import adapter_lines
from loadgen.report.cluster_metrics_report import cluster_metrics_lines
from loadgen.report.compare_md import comparison_lines, speedup_lines
from loadgen.report.cost import render_cost_markdown
from loadgen.report.decision import decision_markdown_lines
from loadgen.report.images import image_lines
from loadgen.report.latency_render import latency_lines
from loadgen.report.lost_workers import worker_notes
from loadgen.report.markdown_summary import cold_lines, goodput_lines, summary_lines
from loadgen.report.numbers import (
    AS_SET,
    CPU_PERCENT,
    LOOP_LAG_MS,
    REQ_PER_S,
    SHARE,
    TOK_PER_S,
    counted,
    figure,
    in_percent,
    ms,
    percent,
    stat_ms,
)
from loadgen.report.pooling import pooling_lines
from loadgen.report.quality_render import quality_markdown_lines
from loadgen.report.reasoning import reasoning_lines
from loadgen.report.server_metrics_report import server_metrics_lines
from loadgen.report.sessions import session_lines
from loadgen.report.stopped_early import stopped_early_text
from loadgen.report.tool_calls import tool_calls_lines
from loadgen.report.whole_replies import whole_reply_lines

__all__ = ["render_markdown"]

_METRIC_LABEL = {
    "ttft": "TTFT",
    "itl": "ITL (per token)",
    "icl": "ICL (per chunk)",
    "tpot": "TPOT",
    "e2e": "E2E",
    "queue_delay": "Queue delay (connect start − scheduled)",
    "ttft_from_schedule": "TTFT from schedule (first token − scheduled)",
    "e2e_from_schedule": "E2E from schedule (done − scheduled)",
    "connect": "TCP connect (new connections only, not in TTFT)",
    "tls": "TLS handshake (new connections only, not in TTFT)",
}
_STATS = ("p50", "p90", "p95", "p99", "p99.9", "max", "mean")
_TOKEN_SOURCE_NOTE = {
    "server": "exact per-chunk counts from the server",
    "one_per_chunk": "no per-chunk counts: each chunk taken as one token (ITL/TPOT approximate when chunks carry "
    "several tokens)",
    "usage_spread": "estimated: the server sent no per-chunk counts and its final usage disagreed with the chunks, "
    "so the usage total was spread evenly over the chunks (ITL and TPOT are estimates)",
    "usage": "whole replies (stream: false): output tokens from each reply's usage, no chunks to count",
    "uncounted": "whole replies without usage: their output tokens are unknown (0 in the totals)",
    "tokenizer": "counted by the scenario's tokenizer: the server sent no per-chunk counts, so each reply was "
    "tokenized whole and each token given to the chunk that carried its end (per-chunk counts, ITL and TPOT from the "
    "tokenizer; token totals and throughput still from the server's usage)",
}


def _p50_p99(*summaries: dict[str, Any]) -> str:
    """The p50 and p99 cells of each latency summary, in order."""
    return " | ".join(stat_ms(s, k) for s in summaries for k in ("p50", "p99"))


def _groups(v: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [("**all**", v["overall"]), *v["mixes"].items()]


def render_markdown(report: dict[str, Any]) -> str:
    run = report["run"]
    lines = [f"# loadgen report — {report['scenario']}", ""]
    verdict = "trustworthy" if run["trustworthy"] else "**NOT trustworthy**"
    verdict = "**FAILED** (no verdict)" if run.get("failed") else verdict
    lines.append(
        f"Measured window {run['window_s']:.1f} s (warm-up excluded) · seed {report['seed']} · "
        f"percentiles from HDR histograms, ±{percent(report['histogram']['relative_error'], AS_SET)} · run {verdict}"
    )
    split = run.get("users_per_variant")
    if split:
        lines.append("Users per variant: " + ", ".join(f"{k} {n}" for k, n in split.items()))
    lengths = report.get("prompt_lengths")
    if lengths:
        lines.append(
            f"Prompt lengths: exact in the tokens of `{lengths['tokenizer']}` (plus the chat template's own tokens)"
            if lengths["exact"]
            else "Prompt lengths: approximate (common words, about one token each; set `tokenizer:` for exact lengths)"
        )
    capped = [v["name"] for v in report["variants"] if v.get("output_length") == "max_only"]
    if capped:
        lines.append(f"Output lengths: max_tokens only a cap (a request may stop early at EOS) for {', '.join(capped)}")
    if len(capped) < len(report["variants"]):
        lines.append("Output lengths: exactly max_tokens (EOS ignored)" + (" for the others" if capped else ""))
    lines += whole_reply_lines(report)  # stream: false
    lines += pooling_lines(report)  # embeddings, rerank
    stopped = stopped_early_text(run)  # stop_when: ended the run
    lines += [f"- ⏹ {stopped}"] if stopped else []
    for r in run.get("failed", []):
        lines.append(f"- ✖ run failed: {r}")
    for r in run.get("untrustworthy_reasons", []):
        lines.append(f"- ⚠ {r}")
    for e in run.get("user_exceptions", []):
        where = f" at {e['where']}" if e.get("where") else ""
        lines.append(f"- ⚠ exception in users ×{e['count']} ({', '.join(e['nodes'])}){where}: {e['message']}")
    lines += [f"- ⚠ {text}" for text in worker_notes(run)]
    for note in run.get("recovered", []):
        lines.append(f"- {note}")
    master = run.get("master") or {}
    if master.get("merge_ms_per_interval_max") is not None:
        lines.append(
            f"- master: merged {counted(master['reports_merged'], 'worker report')}, "
            f"{master['merge_ms_per_interval_p50']} ms "
            f"per 3 s interval (largest {master['merge_ms_per_interval_max']} ms), "
            f"peak memory {master['rss_peak_mb']} MB"
        )
    for r in run.get("raw_records_lost", []):
        lines.append(
            f"- ⚠ raw records of {r['worker']}: {counted(r['rows'], 'row')} lost, writing to {r['folder']} failed "
            f"({r['error']}); "
            "its histograms and counters in this report are whole"
        )
    lines += summary_lines(report)
    lines += decision_markdown_lines(report)  # speed, quality and cost side by side
    lines += ["", "## Throughput and errors", ""]
    lines.append(
        "| variant | mix | requests | ok | success | errors | cut by stop | req/s | output tok/s | input tok/s "
        "| stopped at max_tokens |"
    )
    lines.append("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|")
    sources: set[str] = set()
    no_tokens: list[str] = []
    cancelled: list[str] = []
    for v in report["variants"]:
        for mix, g in _groups(v):
            errs = ", ".join(f"{k} {n}" for k, n in g["errors"].items()) or "0"
            lines.append(
                f"| {v['name']} | {mix} | {g['requests']} | {g['ok']} | {percent(g['success_rate'])} | {errs} "
                f"| {g.get('cut_by_stop', 0)} | {figure(g['requests_per_s'], REQ_PER_S)} "
                f"| {figure(g['output_tokens_per_s'], TOK_PER_S)} | {figure(g['input_tokens_per_s'], TOK_PER_S)} "
                f"| {percent(g.get('stopped_at_max_tokens'), SHARE)} |"
            )
            sources.update(g["token_count_source"])
            if mix == "**all**" and g.get("ok_without_tokens"):
                no_tokens.append(f"{v['name']} {g['ok_without_tokens']}")
            if mix == "**all**" and g.get("cancelled"):
                cancelled.append(f"{v['name']} {g['cancelled']}")
    lines += [
        "",
        "Requests belong to the window they were sent in (open loop: scheduled in), whenever they end: inside "
        "the window, or in the drain after the stop (`load.drain`: what was in flight is given time to finish, "
        "measured whole); req/s counts the successful ones that completed inside the window. Token throughput "
        "counts the tokens whose chunks arrived inside the window, from any request. A failed request is an error "
        "of its class and a *censored* sample: above every measured value in E2E and TPOT, and in TTFT too when it "
        "failed before its first token — a percentile that falls among them shows as `censored`, so a p99 cannot "
        "pass because the slow requests died. A request still running when the drain ended (cut by the stop), or "
        "given up by the client (`traffic.cancel`), is censored the same way, not in the success rate: a p99 "
        "cannot improve because the slowest requests were still running or abandoned.",
    ]
    by_fate = [
        f"{v['name']} " + " · ".join(f"{f} {n:,}" for f, n in v["overall"]["fates"].items())
        for v in report["variants"]
        if v["overall"].get("fates")
    ]
    if by_fate:
        lines.append(f"- every request by how it ended (docs/reference/fates.md): {'; '.join(by_fate)}")
    for src in sorted(sources):
        lines.append(f"- token counts `{src}`: {_TOKEN_SOURCE_NOTE.get(src, src)}")
    if no_tokens:
        lines.append(f"- ⚠ successful requests that streamed no token (no TTFT): {', '.join(no_tokens)}")
    if cancelled:  # traffic.cancel
        lines.append(
            f"- cancelled by the client mid-reply (`traffic.cancel`): {', '.join(cancelled)} — neither successes "
            "nor errors; censored in E2E and TPOT (their end is unknown), their TTFT counts where their first "
            "token came"
        )
    lines += goodput_lines(report)
    lines += cold_lines(report)
    lines += _open_loop_lines(report)
    lines += _cache_lines(report)
    lines += server_metrics_lines(report)
    lines += latency_lines(report)
    lines += reasoning_lines(report)
    lines += tool_calls_lines(report)
    lines += cluster_metrics_lines(report)
    lines += render_cost_markdown(report)
    for metric in _METRIC_LABEL:
        rows = []
        for v in report["variants"]:
            for mix, g in _groups(v):
                s = g["metrics_ms"].get(metric)
                if s and (s.get("count") or s.get("censored")):
                    cells = " | ".join(stat_ms(s, k) for k in _STATS)
                    rows.append(f"| {v['name']} | {mix} | {s['count']:,} | {s.get('censored', 0):,} | {cells} |")
        if not rows:
            continue
        lines += ["", f"## {_METRIC_LABEL[metric]} (ms)", ""]
        lines.append("| variant | mix | samples | censored | p50 | p90 | p95 | p99 | p99.9 | max | mean |")
        lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        lines += rows
    lines += _bucket_lines(report)
    lines += _turn_lines(report)
    lines += session_lines(report)
    lines += image_lines(report)
    lines += _class_lines(report)
    lines += adapter_lines(report)
    lines += speedup_lines(report)
    lines += comparison_lines(report)
    lines += quality_markdown_lines(report)
    if report["slos"]:
        by_class = any(s.get("class") for s in report["slos"])
        lines += ["", "## SLOs", ""]
        lines.append("| variant | mix | " + ("class | " if by_class else "") + "SLO | observed | result |")
        lines.append("|---|---|" + ("---|" if by_class else "") + "---|---:|---|")
        for s in report["slos"]:
            res = "pass" if s["passed"] else "**FAIL**"
            if s.get("min_percent") is not None:  # a share: success rate, open-loop arrivals sent
                obs = in_percent(s.get("observed_percent"), missing="no data")
                if not s["passed"] and s.get("errors"):
                    obs += " (" + ", ".join(f"{k} {n}" for k, n in s["errors"].items()) + ")"
            elif s.get("censored"):
                obs = (
                    "censored (failed or cut sessions)"
                    if s["metric"] == "session_duration"
                    else "censored (failed requests)"
                )
            else:
                obs = ms(s.get("observed_ms"), "no data")
            cls = f"{s.get('class') or 'all'} | " if by_class else ""
            mix = s["mix"] or (f"adapter {s['adapter']}" if s.get("adapter") else "all")
            lines.append(f"| {s['variant']} | {mix} | {cls}{s.get('slo', s['metric'])} | {obs} | {res} |")
    workers = run.get("workers") or {}
    if workers:
        lines += ["", "## Load generator health", ""]
        lines.append(
            "| worker | loop lag p50 ms | p99 ms | max ms | CPU mean % | CPU p90 % | reads > 1 ms late "
            "| latest read ms | reads taken in C |"
        )
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for wid, h in sorted(workers.items()):
            lag = h.get("loop_lag_ms", {})
            cpu = h.get("cpu_percent", {})
            rd = h.get("read_delay", {})
            lines.append(
                f"| {wid} | {figure(lag.get('p50'), LOOP_LAG_MS)} | {figure(lag.get('p99'), LOOP_LAG_MS)} "
                f"| {figure(lag.get('max'), LOOP_LAG_MS)} | {figure(cpu.get('mean'), CPU_PERCENT)} "
                f"| {figure(cpu.get('p90'), CPU_PERCENT)} | {percent(rd.get('late_share'))} | {ms(rd.get('max_ms'))} "
                f"| {percent(rd.get('in_c_share'), SHARE)} |"
            )
        lines += [
            "",
            "Loop lag: how late the event loop woke from a 10 ms sleep (requests go out that late). Chunk times are "
            "the kernel's receive stamps, so a late read costs no accuracy unless a later chunk of the same stream "
            "arrived before it (then both carry the later time). Reads taken in C: token chunks the C read path "
            "accounted without Python (response heads, ends and other servers' chunk shapes are parsed in Python).",
        ]
    lines += ["", f"Exit code: {report['exit_code']}", ""]
    return "\n".join(lines)


def _cache_lines(report: dict[str, Any]) -> list[str]:
    """Prompt tokens served from the server's prefix cache, per variant and mix, where the server reports them."""
    rows, silent = [], []
    for v in report["variants"]:
        reported = False
        for mix, g in _groups(v):
            c = g.get("cached_prompt_tokens")
            if not c or not c.get("reported_by"):
                continue
            reported = True
            share_cell = percent(g.get("cached_prompt_tokens_share"), SHARE)
            rows.append(
                f"| {v['name']} | {mix} | {c['reported_by']:,} | {c['prompt_tokens']:,} | {c['cached_tokens']:,} "
                f"| {share_cell} |"
            )
        if not reported and "cached_prompt_tokens" in v["overall"]:
            silent.append(v["name"])
    shared = [
        f"{v['name']} {percent(v['overall']['shared_prefix_share'], SHARE)}"
        for v in report["variants"]
        if v["overall"].get("shared_prefix_share")
    ]
    if not rows and not silent and not shared:
        return []
    lines = ["", "## Prefix cache (prompt tokens the server served from its cache)", ""]
    if rows:
        lines.append("| variant | mix | requests reporting | prompt tokens | cached | cached share |")
        lines.append("|---|---|---:|---:|---:|---:|")
        lines += rows
        lines.append("")
    for name in silent:
        lines.append(f"- `{name}`: the server reported no cached prompt tokens (share unknown, not zero)")
    if shared:
        lines.append("- shared prefix of the prompts sent (system prompts, shared documents): " + ", ".join(shared))
    return lines


def _bucket_lines(report: dict[str, Any]) -> list[str]:
    """TTFT and E2E per length bucket of each mix."""
    rows = []
    for v in report["variants"]:
        for mix, g in v["mixes"].items():
            for b, bs in (g.get("buckets") or {}).items():
                t, e = bs.get("ttft_ms", {}), bs.get("e2e_ms", {})
                rows.append(f"| {v['name']} | {mix} | {b} | {bs['requests']:,} | {bs['ok']:,} | {_p50_p99(t, e)} |")
    if not rows:
        return []
    lines = ["", "## TTFT and E2E by bucket (ms)", ""]
    lines.append("| variant | mix | bucket | requests | ok | TTFT p50 | TTFT p99 | E2E p50 | E2E p99 |")
    lines.append("|---|---|---|---:|---:|---:|---:|---:|---:|")
    return lines + rows


def _turn_lines(report: dict[str, Any]) -> list[str]:
    """TTFT by turn of each mix sent as multi-turn sessions: prompts grow with the history, so TTFT should grow
    with the turn, or stay flat where a prefix cache serves the history."""
    rows = []
    for v in report["variants"]:
        for mix, g in v["mixes"].items():
            for turn, ts in (g.get("turns") or {}).items():
                t, e = ts.get("ttft_ms", {}), ts.get("e2e_ms", {})
                rows.append(
                    f"| {v['name']} | {mix} | {turn} | {ts['requests']:,} | {ts['ok']:,} | {ts['ended_by_failure']:,} "
                    f"| {figure(ts['mean_prompt_tokens'])} | {_p50_p99(t, e)} |"
                )
    if not rows:
        return []
    lines = ["", "## TTFT by turn (multi-turn sessions, ms)", ""]
    lines.append(
        "| variant | mix | turn | requests | ok | ended by failure | mean prompt tokens | TTFT p50 | TTFT p99 "
        "| E2E p50 | E2E p99 |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines += rows
    lines += [
        "",
        "Turn k sends the whole conversation so far (every earlier message and the variant's own replies) plus a "
        "new message, so its prompt grows with k. A failed turn ends its session (ended by failure); mean prompt "
        "tokens is the server's count over the successful turns.",
    ]
    return lines


def _class_lines(report: dict[str, Any]) -> list[str]:
    """Results per priority class, where a variant's traffic had more than one."""
    rows, headers_only = [], []
    for v in report["variants"]:
        classes = v.get("classes") or {}
        if len(classes) < 2:
            continue
        if any(c["priority"] is not None and not c["priority_sent"] for c in classes.values()):
            headers_only.append(f"`{v['name']}` ({v['dialect']})")
        for name, c in classes.items():
            m = c["metrics_ms"]
            t, p, e = m.get("ttft") or {}, m.get("tpot") or {}, m.get("e2e") or {}
            share, asked = percent(c["share"], SHARE), percent(c["configured_share"], SHARE)
            prio = "–" if c["priority"] is None else str(c["priority"]) + ("" if c["priority_sent"] else " (not sent)")
            rows.append(
                f"| {v['name']} | {name} | {prio} | {c['requests']:,} | {share} ({asked}) "
                f"| {c['ok']:,} | {percent(c['success_rate'])} | {_p50_p99(t, p, e)} |"
            )
    if not rows:
        return []
    lines = ["", "## Priority classes (ms)", ""]
    lines.append(
        "| variant | class | priority | requests | share (asked) | ok | success | TTFT p50 | TTFT p99 | TPOT p50 "
        "| TPOT p99 | E2E p50 | E2E p99 |"
    )
    lines.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    lines += rows
    lines += [
        "",
        "Each request's class is drawn by share apart from its prompt and lengths, so the classes see the same "
        "traffic; a server that schedules by priority shows it in their TTFT. The priority goes in the body as "
        "`priority` (vLLM with `--scheduling-policy priority`: lower first; SGLang with "
        "`--enable-priority-scheduling`: higher first unless `--schedule-low-priority-values-first`).",
    ]
    if headers_only:
        lines.append(f"- no priority field for {', '.join(headers_only)}: its classes differ by their headers only")
    return lines


def _open_loop_lines(report: dict[str, Any]) -> list[str]:
    """Requested vs achieved rate and what became of every arrival, per variant (open-loop runs only)."""
    rows = [(v["name"], v["open_loop"], v["overall"]) for v in report["variants"] if v.get("open_loop")]
    if not rows:
        return []
    first = rows[0][1]
    kind = first["kind"] + (f" (burstiness {first['burstiness']:g})" if first.get("burstiness") else "")
    lines = ["", "## Open-loop arrivals", ""]
    senders = ", ".join(f"{name} {o['senders']}" for name, o, _ in rows)
    lines.append(
        f"Schedule {kind}, overflow `{first['overflow']}`; at most as many requests in flight per variant, over all "
        f"workers, as it has senders (users: load.users split by weight): {senders}."
    )
    trace = first.get("trace")
    if trace:  # traffic.trace: the window of the production trace replayed
        window = f"from {trace['start_s']:g} s" + (f" for {trace['duration_s']:g} s" if trace["duration_s"] else "")
        lines.append(
            f"Trace: {trace['format']}, {trace['rows_in_window']:,} of its {trace['rows_in_file']:,} rows ({window} "
            f"of trace time, time_scale {trace['time_scale']:g}: {trace['span_s']:g} s), asking for "
            f"{trace['input_tokens']:,} input and {trace['output_tokens']:,} output tokens"
            + (f"; {trace['failed_left_out']:,} failed rows left out" if trace["failed_left_out"] else "")
            + "."
        )
    lines += [
        "",
        "| variant | requested req/s | achieved req/s | achieved | sent | dropped | unsent at stop | in warm-up "
        "| queue delay p50 ms | p99 ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, o, g in rows:
        qd = g["metrics_ms"].get("queue_delay") or {}
        lines.append(
            f"| {name} | {figure(float(o['requested_rate_per_s']), REQ_PER_S)} "
            f"| {figure(o['achieved_rate_per_s'], REQ_PER_S)} | {percent(o['achieved_share'], SHARE)} "
            f"| {o['sent']:,} | {o['dropped']:,} | {o['unsent_at_stop']:,} | {o['in_warmup']:,} "
            f"| {stat_ms(qd, 'p50')} | {stat_ms(qd, 'p99')} |"
        )
    lines += [
        "",
        "Achieved: arrivals sent inside the measured window per second of it. Every arrival is sent (due in the "
        "window and sent by a sender coming free in the drain after the stop, too), dropped (overflow `drop`: every "
        "user of its variant was busy; or the `late` backlog full), sent or dropped during the warm-up, or unsent "
        "when the drain ended (waiting for a free user, or handed to one that was stopped before it went out). "
        "Dropped and unsent arrivals are failed requests of class `not_sent`, censored in every latency, and the "
        "run breaches when more than `load.max_not_sent_percent` of them went unsent: the target did not sustain "
        "the rate. Queue delay is connect start − scheduled; with overflow `late` it holds the lag of every arrival "
        "that waited for a user. Open-loop TTFT and E2E SLOs are judged from the schedule (`load.latency_from`).",
    ]
    return lines
