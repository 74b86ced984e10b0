"""CSV of per-request records, from the raw shards (`--raw-records DIR`): one row per request, with the derived
timings in milliseconds, for spreadsheets and notebooks. The report itself keeps no per-request rows."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from loadgen.measure.fates import fate_name
from loadgen.measure.records import RequestRecord

__all__ = ["COLUMNS", "read_shards", "render_csv"]

# (column, raw-row key, scale): seconds become milliseconds.
_FIELDS: tuple[tuple[str, str, float | None], ...] = (
    ("id", "id", None),
    ("variant", "variant", None),
    ("mix", "mix", None),
    ("adapter", "adapter", None),  # (`variants[].adapters`) the LoRA adapter the request named
    ("bucket", "bucket", None),
    ("turn", "turn", None),
    ("status", "status", None),
    ("error", "error", None),
    ("finish_reason", "finish_reason", None),
    ("warmup", "warmup", None),
    ("cut_by_stop", "cut_by_stop", None),
    ("cancelled", "cancelled", None),  # (`traffic.cancel`) given up by the client mid-reply: time / tokens
    ("fate", "fate", None),  # how it ended (docs/reference/fates.md)
    ("scheduled_s", "scheduled", None),
    ("sent_s", "sent", None),
    ("done_s", "done", None),
    ("ttft_ms", "ttft", 1e3),
    ("tpot_ms", "tpot", 1e3),
    ("e2e_ms", "e2e", 1e3),
    ("connect_ms", "connect_s", 1e3),
    ("prompt_tokens", "prompt_tokens", None),
    ("prompt_tokens_target", "prompt_tokens_target", None),
    ("cached_prompt_tokens", "cached_prompt_tokens", None),
    ("output_tokens", "output_tokens", None),
    ("max_tokens", "max_tokens", None),
    ("token_source", "token_source", None),
    ("chunks", "chunk_times", None),
    ("trace_id", "trace_id", None),  # (`tracing:`) what a tracing backend finds the request's spans by
)
COLUMNS = tuple(name for name, _, _ in _FIELDS)


def read_shards(directory: Path) -> list[dict[str, Any]]:
    """Every row of the `records-*.jsonl` shards under `directory`; ValueError naming file and line on a bad one."""
    shards = sorted(directory.rglob("records-*.jsonl"))
    if not shards:
        raise ValueError(f"{directory}: no records-*.jsonl shards (written by --raw-records DIR)")
    rows: list[dict[str, Any]] = []
    for shard in shards:
        for n, line in enumerate(shard.read_bytes().splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = orjson.loads(line)
            except orjson.JSONDecodeError as e:
                raise ValueError(f"{shard}:{n}: not a JSON record ({e})") from None
            if not isinstance(row, dict) or "id" not in row:
                raise ValueError(f"{shard}:{n}: not a loadgen record (no id)")
            rows.append(row)
    return rows


def _cell(row: dict[str, Any], key: str, scale: float | None) -> Any:
    value = row.get(key)
    if key == "chunk_times":
        return len(value or ())
    if value is None:
        return ""
    if scale is not None:
        return round(float(value) * scale, 3)
    return value


def render_csv(rows: Iterable[dict[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    for row in sorted(rows, key=lambda r: (r.get("sent") or 0.0, str(r["id"]))):
        if not row.get("fate"):  # a row of an older shard: its fate from its own fields
            row = row | {"fate": fate_name(RequestRecord.from_json(row))}
        writer.writerow([_cell(row, key, scale) for _, key, scale in _FIELDS])
    return out.getvalue()
