"""The sentence a report says for each lost worker (`run.lost_workers`): what of its work is missing, with the
requests it had in flight at its last report counted (`run.lost_in_flight`). Markdown and HTML say the same words."""

from __future__ import annotations

from typing import Any

__all__ = ["lost_worker_texts"]


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
