"""What a scenario may ask of variants whose replies come whole (`variants[].stream: false`).

Such a variant has no first token and no gaps between tokens: TTFT, ITL, ICL and TPOT are not measured for it. An
SLO that names it on one of those is refused (it could never be judged), and so are per-request goodput bounds on
them while any variant's replies come whole (its requests would meet them vacuously, and its goodput would read
better than a streamed variant's for it). An SLO for every variant on such a metric is judged on the streamed
variants only (`report/build.py`), which the report says. Nor can such a reply be given up after a count of
tokens (`traffic.cancel.after_tokens`): no token comes before the whole reply.
"""

from __future__ import annotations

from loadgen.config.cancel import Cancel
from loadgen.config.slo import SLO
from loadgen.config.variant import Variant
from loadgen.config.verdict_options import Goodput
from loadgen.metric_names import STREAM_METRICS

__all__ = ["GOODPUT_STREAM_BOUNDS", "whole_reply_issues"]

# The goodput bounds (`Goodput` fields) only a stream can meet.
GOODPUT_STREAM_BOUNDS: tuple[str, ...] = ("ttft_ms", "tpot_ms", "itl_max_ms")


def whole_reply_issues(
    variants: list[Variant], slos: list[SLO], goodput: Goodput | None, cancel: Cancel | None = None
) -> list[tuple[tuple[str | int, ...], str]]:
    """The scenario's field paths and messages of what variants with `stream: false` cannot be judged on."""
    whole = [v.name for v in variants if not v.stream]
    if not whole:
        return []
    issues: list[tuple[tuple[str | int, ...], str]] = []
    for i, slo in enumerate(slos):
        if slo.variant in whole and slo.metric in STREAM_METRICS:
            issues.append(
                (
                    ("slos", i, "metric"),
                    f"variant {slo.variant!r} has stream: false: its replies come whole, with no {slo.metric} to "
                    "judge (e2e and success_rate can be)",
                )
            )
    if goodput is not None:
        for bound in GOODPUT_STREAM_BOUNDS:
            if getattr(goodput, bound) is not None:
                issues.append(
                    (
                        ("goodput", bound),
                        f"variant {whole[0]!r} has stream: false: its whole replies would meet this bound without "
                        "being measured on it; judge goodput on e2e_ms (and queue_delay_ms), or stream every variant",
                    )
                )
    if cancel is not None and cancel.after_tokens is not None:
        issues.append(
            (
                ("traffic", "cancel", "after_tokens"),
                f"variant {whole[0]!r} has stream: false: no token comes before its whole reply, so none can be "
                "given up after a count of tokens; give up by time (after: [min, max]), or stream every variant",
            )
        )
    return issues
