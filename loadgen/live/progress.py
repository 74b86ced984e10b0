"""The headless run's status line: elapsed / total, users, requests/s, TTFT p50 / p99 per variant, errors, trust.

On a terminal it is one line redrawn in place (a progress bar, cut to the terminal's width); in a CI log, where
carriage returns only pile up, plain lines, one every few seconds. Pure: the plugin (locust_plugin/progress.py)
feeds it the live summary and writes the result.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BAR_WIDTH", "final_newline", "progress_line", "render"]

BAR_WIDTH = 20


def _dur(s: float) -> str:
    s = max(0, int(s))
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _ms(v: Any) -> str:
    return "—" if v is None else f"{v:.0f}" if v >= 100 else f"{v:.1f}"


def progress_line(summary: dict[str, Any], elapsed_s: float, total_s: float | None, users: int | None) -> str:
    """The status text, without bar or line ending."""
    variants = summary["variants"]
    rps = sum(v["overall"]["requests_per_s"] or 0.0 for v in variants)
    errors: dict[str, int] = {}
    for v in variants:
        for cls, n in v["overall"]["errors"].items():
            errors[cls] = errors.get(cls, 0) + n
    parts = [f"{_dur(elapsed_s)}/{_dur(total_s)}" if total_s else _dur(elapsed_s)]
    parts.append(f"users {users if users is not None else '—'}")
    parts.append(f"{rps:.1f} req/s")
    for v in variants:
        ttft = v["overall"]["metrics_ms"].get("ttft") or {}
        parts.append(f"{v['name']} TTFT p50 {_ms(ttft.get('p50'))} p99 {_ms(ttft.get('p99'))} ms")
    n_err = sum(errors.values())
    top = ", ".join(f"{c} {n}" for c, n in sorted(errors.items(), key=lambda kv: (-kv[1], kv[0]))[:3])
    parts.append(f"errors {n_err} ({top})" if n_err else "errors 0")
    run = summary["run"]
    bad = len(run.get("untrustworthy_reasons") or []) + len(run.get("lost_workers") or [])
    failed = len(run.get("failed") or [])
    if failed:  # something crashed: say it first, whatever the trust
        parts.append(f"RUN FAILED ({failed} crash{'es' if failed > 1 else ''})")
    parts.append("trust ok" if not bad else f"NOT TRUSTWORTHY ({bad} reason{'s' if bad > 1 else ''})")
    return " | ".join(parts)


def render(text: str, elapsed_s: float, total_s: float | None, tty: bool, columns: int = 120) -> str:
    """What to write: on a terminal `\\r`, a bar and the text cut to `columns` (no newline: the next one draws over
    it; `\\x1b[K` clears what a longer previous line left); elsewhere a plain line."""
    if not tty:
        return f"loadgen: {text}\n"
    if total_s:
        done = min(1.0, max(0.0, elapsed_s / total_s))
        filled = round(done * BAR_WIDTH)
        bar = f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done * 100:3.0f}% "
    else:
        bar = ""
    line = (bar + text)[: max(10, columns - 1)]
    return f"\r{line}\x1b[K"


def final_newline(tty: bool) -> str:
    """After the last redraw on a terminal, the line ends so the report starts on its own."""
    return "\n" if tty else ""
