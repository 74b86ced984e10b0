"""What both baseline users share: the request body, the record of one stream, and writing records at the end."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

MAX_TOKENS = int(os.environ.get("BENCH_MAX_TOKENS", "64"))
RECORDS = os.environ.get("BENCH_RECORDS", "")
BODY = orjson.dumps(
    {
        "model": "bench",
        "messages": [{"role": "user", "content": "tell me a story about the sea " * 4}],
        "max_tokens": MAX_TOKENS,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
)
PATH = "/v1/chat/completions"


class Recorder:
    """Per-stream timestamps, counted from `usage.completion_tokens` like loadgen, written as JSONL at exit."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    def stream(self, rid: str, sent: float, lines: Any) -> None:
        """`lines` yields (arrival time, raw line) as the user's reader returns them."""
        times: list[float] = []
        tokens: list[int] = []
        last = 0
        error = None
        done = False
        try:
            for t, line in lines:
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    done = True
                    break
                obj = orjson.loads(payload)
                usage = obj.get("usage")
                cum = usage.get("completion_tokens") if usage else None
                if obj.get("choices") and cum is not None and cum > last:
                    times.append(t)
                    tokens.append(cum - last)
                    last = cum
        except Exception as e:  # noqa: BLE001 - a baseline records, it does not judge
            error = repr(e)
        if not done and error is None:
            error = "no [DONE]"
        self.rows.append({"id": rid, "sent": sent, "chunk_times": times, "chunk_tokens": tokens, "error": error})

    def write(self) -> None:
        if RECORDS:
            path = Path(RECORDS) / f"records-{os.getpid()}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(b"".join(orjson.dumps(r, option=orjson.OPT_APPEND_NEWLINE) for r in self.rows))
