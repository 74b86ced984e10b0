"""`report["quality"]` (report/quality.py) in the Markdown and HTML reports: one headline per variant (speedup and
agreement with the baseline, in words), then a row per variant and mix."""

from __future__ import annotations

import html
from typing import Any

from loadgen.report.numbers import AS_SET, percent, percent_ci

__all__ = ["quality_html", "quality_markdown_lines"]

_FIGURES = (
    ("agreement", "agreement (first k)"),
    ("exact_match", "exact match"),
    ("edit_similarity", "edit similarity"),
)


def _with_ci(f: dict[str, Any]) -> str:
    """ "97.2 % (96.1–98.1)"."""
    return percent_ci(f.get("value"), f.get("ci_low"), f.get("ci_high"))


def _method_note(q: dict[str, Any]) -> str:
    m = q["method"]
    tokens = "the scenario's tokenizer's tokens" if m["tokens"] == "tokenizer" else "words split on whitespace"
    note = (
        f"Each variant's replies against the baseline's for the same requests (greedy decoding assumed: temperature "
        f"0 and a seed in every variant). Agreement: of the first {m['first_k']} tokens ({tokens}), the share the "
        f"variant's token is the baseline's; exact match: identical replies; edit similarity: 1 − Levenshtein ÷ the "
        f"longer reply, in tokens. A sample of at most {m['sample_cap']:,} requests per variant, replies cut at "
        f"{m['max_chars']:,} characters; {percent(m['confidence'], AS_SET)} intervals from {m['resamples']:,} "
        "bootstrap resamples of the pairs."
    )
    if m.get("tokens_note"):
        note += f" Tokens: {m['tokens_note']}."
    return note


_ACCURACY_NOTE = (
    "Accuracy: of the successful requests whose dataset row carries a reference answer (expected, match), the "
    "share answered right, every one judged, with a Wilson score interval."
)


def _accuracy_markdown(q: dict[str, Any]) -> list[str]:
    rows = q.get("accuracy") or []
    if not rows:
        return []
    lines = ["", _ACCURACY_NOTE, "", "| variant | mix | judged | right | accuracy |", "|---|---|---:|---:|---:|"]
    for e in rows:
        mix = "all" if e["mix"] == "*" else e["mix"]
        lines.append(f"| {e['variant']} | {mix} | {e['judged']:,} | {e['right']:,} | {_with_ci(e['accuracy'])} |")
    return lines


def _accuracy_html(q: dict[str, Any]) -> str:
    rows = q.get("accuracy") or []
    if not rows:
        return ""
    e_ = html.escape
    body = "".join(
        f"<tr><td class=text>{e_(e['variant'])}</td><td class=text>{e_('all' if e['mix'] == '*' else e['mix'])}</td>"
        f"<td>{e['judged']:,}</td><td>{e['right']:,}</td><td>{e_(_with_ci(e['accuracy']))}</td></tr>"
        for e in rows
    )
    head = "<tr><th class=text>variant</th><th class=text>mix</th><th>judged</th><th>right</th><th>accuracy</th></tr>"
    return f"<table>{head}{body}</table><p class=note>{e_(_ACCURACY_NOTE)}</p>"


def quality_markdown_lines(report: dict[str, Any]) -> list[str]:
    q = report.get("quality")
    if not q:
        return []
    lines = ["", f"## Quality beside speed (vs baseline `{report['baseline']}`)", "", _method_note(q), ""]
    if not q["entries"]:
        why = q["method"].get("note") or "no request was answered by both the baseline and another variant"
        return [*lines, why[0].upper() + why[1:] + ".", *_accuracy_markdown(q)]
    lines += [f"- {e['headline']}" for e in q["entries"] if e.get("headline")]
    lines += ["", "| variant | mix | pairs | " + " | ".join(label for _, label in _FIGURES) + " |", "|---|---|---:|"]
    lines[-1] += "---:|" * len(_FIGURES)
    for e in q["entries"]:
        mix = "all" if e["mix"] == "*" else e["mix"]
        cells = " | ".join(_with_ci(e[key]) for key, _ in _FIGURES)
        lines.append(f"| {e['variant']} | {mix} | {e['pairs']:,} | {cells} |")
    return lines + _accuracy_markdown(q)


def quality_html(report: dict[str, Any]) -> str:
    q = report.get("quality")
    if not q:
        return ""
    e_ = html.escape
    heads = [f"<p class=text>{e_(e['headline'])}</p>" for e in q["entries"] if e.get("headline")]
    rows = []
    for e in q["entries"]:
        mix = "all" if e["mix"] == "*" else e["mix"]
        cells = "".join(f"<td>{e_(_with_ci(e[key]))}</td>" for key, _ in _FIGURES)
        rows.append(
            f"<tr><td class=text>{e_(e['variant'])}</td><td class=text>{e_(mix)}</td>"
            f"<td>{e['pairs']:,}</td>{cells}</tr>"
        )
    head = "<tr><th class=text>variant</th><th class=text>mix</th><th>pairs</th>"
    head += "".join(f"<th>{e_(label)}</th>" for _, label in _FIGURES) + "</tr>"
    return (
        "<h2>Quality beside speed</h2>" + "".join(heads) + f"<table>{head}{''.join(rows)}</table>"
        f"<p class=note>{e_(_method_note(q))}</p>" + _accuracy_html(q)
    )
