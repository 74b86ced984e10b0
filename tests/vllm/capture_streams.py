"""Capture vLLM's streamed replies byte for byte (status line, headers, chunked body) as the fixtures the C / Python
read-path parity tests replay (tests/fixtures/vllm/*.http, tests/unit/test_vllm_streams.py).

    bash scripts/install-vllm.sh                      # then serve it (docs/servers.md#vllm-on-a-cpu), and:
    python -m tests.vllm.capture_streams http://127.0.0.1:8000 [SHAPE ...]

One request per shape loadgen sends vLLM: chat with the usage in every chunk (`continuous_usage_stats`, as the
openai-chat dialect asks) and at the end only, chat with structured output (a JSON schema), completions, and the
Messages API (anthropic-messages); greedy, so a capture is the same on a rerun of the same build. (A forced tool call
needs the server started with a `--tool-call-parser`, which SmolLM2's template has none of.) The raw socket keeps what
an HTTP client would hide (chunk boundaries).
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
MODEL = "smollm2"
_MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow, one per line."}]
_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "celsius": {"type": "integer"}},
    "required": ["city", "celsius"],
}
SHAPES: dict[str, tuple[str, dict[str, object]]] = {
    "chat-continuous-usage": (
        "/v1/chat/completions",
        {
            "messages": _MESSAGES,
            "max_tokens": 24,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    ),
    "chat-final-usage": (
        "/v1/chat/completions",
        {"messages": _MESSAGES, "max_tokens": 24, "stream_options": {"include_usage": True}},
    ),
    # Structured output (a tools mix's response_format): the reply is JSON of the schema, token by token.
    "chat-json-schema": (
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
            "max_tokens": 48,
            "response_format": {"type": "json_schema", "json_schema": {"name": "weather", "schema": _SCHEMA}},
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        },
    ),
    "completions": (
        "/v1/completions",
        {"prompt": "The three primary colours are", "max_tokens": 16, "stream_options": {"include_usage": True}},
    ),
    # The Messages API (anthropic-messages): vLLM's chat stream turned into Anthropic's events, usage at the end.
    "messages": ("/v1/messages", {"messages": _MESSAGES, "max_tokens": 24}),
}


def capture(base_url: str, path: str, body: dict[str, object]) -> bytes:
    """The whole HTTP/1.1 response to one streamed POST, as the socket delivered it."""
    url = urlsplit(base_url)
    payload = json.dumps({"model": MODEL, "stream": True, "temperature": 0, "seed": 1, **body}).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {url.netloc}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((url.hostname or "127.0.0.1", url.port or 80), timeout=120) as s:
        s.sendall(head + payload)
        parts = []
        while data := s.recv(65536):
            parts.append(data)
    return b"".join(parts)


def main(base_url: str, only: list[str] | None = None) -> None:
    """Capture every shape, or those named in `only`."""
    FIXTURES.mkdir(parents=True, exist_ok=True)
    for name, (path, body) in SHAPES.items():
        if only and name not in only:
            continue
        raw = capture(base_url, path, body)
        if not raw.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"{name}: {raw[:300]!r}")
        # The Date header changes on every capture; keep the rest as it came.
        head, sep, rest = raw.partition(b"\r\n\r\n")
        lines = [line for line in head.split(b"\r\n") if not line.lower().startswith(b"date:")]
        raw = b"\r\n".join(lines) + sep + rest
        (FIXTURES / f"{name}.http").write_bytes(raw)
        print(f"{name}: {len(raw)} bytes")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000", sys.argv[2:])
