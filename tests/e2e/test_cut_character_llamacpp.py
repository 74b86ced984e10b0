"""A reply cut by max_tokens inside a multi-byte character, against the real llama.cpp server.

SmolLM2's byte-level tokens split an emoji over several tokens; llama.cpp streams no text until a character is whole,
so a reply cut inside one ends with generated tokens that never came as a chunk: the server's usage counts them, the
stream does not carry them. loadgen must keep both counts apart: output tokens (throughput, goodput) from the
server's usage, the streamed tokens (TPOT's span, ITL) from the chunks. A CI run read 53 streamed of 55 generated.

Ground truth is the same stream read by a plain HTTP client, beside loadgen's client and accumulator.
"""

from __future__ import annotations

import json
import urllib.request

import orjson
import pytest

from loadgen.client.connection import Endpoint, StreamConnection
from loadgen.client.reactor import Reactor
from loadgen.measure.records import RequestRecord, TokenSource
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect

pytestmark = pytest.mark.e2e

PROMPT = "Repeat exactly: 😀😀😀😀 日本語 😀😀"


def _body(max_tokens: int) -> dict[str, object]:
    return {
        "model": "smollm2",
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "timings_per_token": True,
    }


def _truth(url: str, max_tokens: int) -> tuple[str, int, int]:
    """(text, the server's count at its last text chunk, its usage total) read with urllib."""
    request = urllib.request.Request(
        url + "/v1/chat/completions", json.dumps(_body(max_tokens)).encode(), {"Content-Type": "application/json"}
    )
    text, at_last_text, usage = "", 0, -1
    with urllib.request.urlopen(request, timeout=60) as reply:
        for line in reply:
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            obj = json.loads(line[6:])
            choices = obj.get("choices") or []
            content = choices[0].get("delta", {}).get("content") if choices else None
            if content:
                text += content
                at_last_text = obj["timings"]["predicted_n"]
            if obj.get("usage"):
                usage = obj["usage"]["completion_tokens"]
    return text, at_last_text, usage


def _loadgen(url: str, max_tokens: int) -> RequestRecord:
    dialect = get_dialect("openai-chat")
    reactor = Reactor()
    conn = StreamConnection(Endpoint(url), 5.0, 60.0, reactor=reactor)
    try:
        head = conn.head_bytes(dialect.path_for("smollm2"), {"Content-Type": "application/json"})
        acc = StreamAccumulator(RequestRecord(f"cut-{max_tokens}", "v", "smollm2"), dialect)
        assert conn.post_stream(head, b"", orjson.dumps(_body(max_tokens)), acc)[1] == 200
        return acc.finish(conn.last_rx)
    finally:
        conn.close()
        reactor.close()


def test_tokens_withheld_inside_a_character_count_as_output_not_as_streamed(llama_server: str) -> None:
    cut = []
    for max_tokens in range(2, 13):
        text, at_last_text, usage = _truth(llama_server, max_tokens)
        rec = _loadgen(llama_server, max_tokens)
        assert rec.error is None, rec.error_detail
        assert rec.finish_reason == "length"
        assert rec.token_source == TokenSource.SERVER
        assert rec.output_tokens == usage == max_tokens
        assert rec.tokens_received == at_last_text, (max_tokens, text)
        assert rec.output_count_beyond_chunks == usage - at_last_text
        if at_last_text < usage:
            cut.append(max_tokens)
            # TPOT's span ends at the last chunk: only the tokens that came inside it divide it.
            if len(rec.chunk_times) >= 2:
                span = rec.chunk_times[-1] - rec.chunk_times[0]
                assert rec.tpot == pytest.approx(span / (at_last_text - rec.chunk_tokens[0]))
    # The emoji and the CJK characters are several byte tokens each: some caps fall inside one (measured: 6 of 11).
    assert cut, "no max_tokens cut a character: the prompt no longer makes SmolLM2 repeat the emoji"
