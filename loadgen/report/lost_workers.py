"""The sentences a report says about workers that did not see the run through: for each lost worker
(`run.lost_workers`) what of its work is missing, with the requests it had in flight at its last report counted
(`run.lost_in_flight`); for each worker that left before the stop (`run.workers_left`: stopped mid-run, it handed its
figures over first) when, and where its users went. Markdown and HTML say the same words."""

from __future__ import annotations

from typing import Any

__all__ = ["lost_worker_texts", "worker_notes"]


def lost_worker_texts(run: dict[str, Any]) -> list[str]:
    in_flight = run.get("lost_in_flight") or {}
    out = []
    for w in run.get("lost_workers") or []:
        n = in_flight.get(w)
        counted = f" ({n} at its last report)" if n is not None else ""
        out.append(
            f"lost worker {w}: its in-flight requests{counted} are in no figure of this report (sent, never seen "
            "to finish), nor is anything it finished after its last report unless recovered below"
        )
    return out


def left_worker_texts(run: dict[str, Any]) -> list[str]:
    return [
        f"{w} left the run {at:g} s in (stopped before the end): its figures up to then are in, and its users ran on "
        "the remaining workers from then on"
        for w, at in (run.get("workers_left") or {}).items()
    ]


def worker_notes(run: dict[str, Any]) -> list[str]:
    """Every sentence about workers that did not see the run through: lost ones first, then those that left."""
    return [*lost_worker_texts(run), *left_worker_texts(run)]
