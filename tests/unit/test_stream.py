"""StreamAccumulator + RequestRecord: the metric definitions of DESIGN.md, on hand-made timed byte streams."""

from __future__ import annotations

from array import array

import orjson
import pytest

from loadgen.measure.records import ErrorKind, RequestRecord, TokenSource
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect


def _chunk(content: str | None = None, role: bool = False, cum: int | None = None, finish: str | None = None) -> bytes:
    delta: dict[str, str] = {}
    if role:
        delta["role"] = "assistant"
        delta["content"] = ""
    if content is not None:
        delta["content"] = content
    obj: dict[str, object] = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    if cum is not None:
        obj["usage"] = {"prompt_tokens": 10, "completion_tokens": cum, "total_tokens": 10 + cum}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


USAGE = b'data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":9,"total_tokens":19}}\n\n'
DONE = b"data: [DONE]\n\n"


def _acc(sent: float = 100.0) -> StreamAccumulator:
    rec = RequestRecord("r1", "v", "chat")
    acc = StreamAccumulator(rec, get_dialect("openai-chat"))
    acc.on_sent(sent)
    return acc


def test_spec_decode_chunks_give_per_token_itl_and_exact_tpot() -> None:
    # 4 tokens per chunk, 40 ms per chunk => 10 ms per token; first chunk already carries 4 tokens.
    acc = _acc()
    acc.feed(100.001, _chunk(role=True, cum=0))  # role-only: not a token, must not set TTFT
    acc.feed(100.200, _chunk("a b c d", cum=4))
    acc.feed(100.240, _chunk("e f g h", cum=8))
    acc.feed(100.280, _chunk("i", cum=9, finish="length"))
    acc.feed(100.281, USAGE + DONE)
    rec = acc.finish(100.300)
    assert rec.ok and acc.saw_done
    assert rec.ttft == pytest.approx(0.200)
    assert list(rec.chunk_tokens) == [4, 4, 1]
    assert rec.token_source == TokenSource.SERVER
    samples = rec.itl_samples()
    assert samples == [(pytest.approx(0.010), 4), (pytest.approx(0.040), 1)]
    assert rec.icl_samples() == [pytest.approx(0.040), pytest.approx(0.040)]
    # (0.280 - 0.200) / (9 - 4) = 16 ms, not (0.08 / 8) = 10 ms that n-1 would give.
    assert rec.tpot == pytest.approx(0.016)
    assert rec.output_tokens == 9 and rec.prompt_tokens == 10
    assert rec.done == pytest.approx(100.281)  # [DONE] arrival, not when reading stopped
    assert rec.e2e == pytest.approx(0.281)


def test_without_server_counts_each_content_chunk_is_one_token() -> None:
    acc = _acc()
    acc.feed(100.0005, _chunk(role=True))
    acc.feed(100.05, _chunk("x"))
    acc.feed(100.06, _chunk(""))  # empty content: no token
    acc.feed(100.07, _chunk("y"))
    # The usage total is one above the chunks: the end-of-sequence token (empty text), not several per chunk.
    acc.feed(100.08, _chunk(None, finish="stop") + USAGE.replace(b":9,", b":3,") + DONE)
    rec = acc.finish(100.09)
    assert rec.token_source == TokenSource.ONE_PER_CHUNK
    assert list(rec.chunk_tokens) == [1, 1]
    assert rec.ttft == pytest.approx(0.05)
    assert rec.output_tokens == 3  # server usage wins over the chunk count for token totals
    assert rec.tpot == pytest.approx(0.02 / 1)  # one gap between the two tokens; the EOS is outside the span
    assert rec.finish_reason == "stop"


def test_a_usage_total_above_the_chunks_is_spread_over_them() -> None:
    # 4 tokens per chunk every 40 ms (10 ms per token), counts only in the final usage: 14 over 4 chunks.
    acc = _acc()
    for i in range(4):
        acc.feed(100.2 + 0.04 * i, _chunk("a b c d"))
    acc.feed(100.33, USAGE.replace(b":9,", b":14,") + DONE)
    rec = acc.finish(100.34)
    assert rec.ok and rec.token_source == TokenSource.USAGE_SPREAD
    assert list(rec.chunk_tokens) == [3, 3, 4, 4]  # the remainder to the later chunks
    assert rec.tokens_received == rec.output_tokens == 14
    # (last - first) / (total - first chunk's share) = 0.12 / 11, not 0.12 / 13 (n - 1) nor 0.12 / 3 (chunks)
    assert rec.tpot == pytest.approx(0.12 / 11)
    assert [s for s, _ in rec.itl_samples()] == [pytest.approx(0.04 / 3), pytest.approx(0.01), pytest.approx(0.01)]


def test_no_spread_where_counts_came_from_the_server_or_the_stream_failed() -> None:
    acc = _acc()
    acc.feed(100.1, _chunk("a", cum=1) + _chunk("b", cum=2))
    acc.feed(100.2, USAGE + DONE)
    rec = acc.finish(100.2)
    assert rec.token_source == TokenSource.SERVER and list(rec.chunk_tokens) == [1, 1]
    acc = _acc()
    acc.feed(100.1, _chunk("a") + _chunk("b"))
    acc.feed(100.2, USAGE)
    rec = acc.fail(100.3, ErrorKind.STREAM_INTERRUPTED, "reset")
    assert rec.error == ErrorKind.STREAM_INTERRUPTED
    assert rec.token_source == TokenSource.ONE_PER_CHUNK and list(rec.chunk_tokens) == [1, 1]


def test_events_sharing_one_read_share_its_arrival_time() -> None:
    acc = _acc()
    acc.feed(100.1, _chunk("a", cum=1) + _chunk("b", cum=2))
    acc.feed(100.2, DONE)
    rec = acc.finish(100.2)
    assert list(rec.chunk_times) == [100.1, 100.1]
    assert rec.itl_samples() == [(0.0, 1)]


def test_error_payload_mid_stream_is_server_error_and_keeps_timings() -> None:
    acc = _acc()
    acc.feed(100.1, _chunk("a", cum=1))
    acc.feed(100.2, b'data: {"error": {"message": "engine died", "code": 500}}\n\n')
    assert acc.fatal
    acc.feed(100.3, _chunk("b", cum=2))  # ignored after a fatal chunk
    rec = acc.finish(100.3)
    assert rec.error == ErrorKind.SERVER_ERROR and "engine died" in rec.error_detail
    assert list(rec.chunk_times) == [100.1]


def test_vllm_error_object_shape() -> None:
    acc = _acc()
    acc.feed(100.1, b'data: {"object": "error", "message": "too long", "code": 400}\n\n')
    assert acc.finish(100.2).error == ErrorKind.SERVER_ERROR


def test_malformed_json_chunk() -> None:
    acc = _acc()
    acc.feed(100.1, b'data: {"choices": [\n\n')
    rec = acc.finish(100.2)
    assert rec.error == ErrorKind.MALFORMED


def test_named_error_event() -> None:
    acc = _acc()
    acc.feed(100.1, b'event: error\ndata: {"detail": "overloaded"}\n\n')
    assert acc.finish(100.2).error == ErrorKind.SERVER_ERROR


def test_stream_cut_without_done_is_interrupted_with_partial_bytes() -> None:
    acc = _acc()
    acc.feed(100.1, _chunk("a", cum=1))
    acc.feed(100.2, b'data: {"choices":[{"delta":{"cont')
    rec = acc.finish(100.3)
    assert rec.error == ErrorKind.STREAM_INTERRUPTED
    assert rec.partial_bytes.startswith(b"data: {")
    assert rec.ttft == pytest.approx(0.1)


def test_transport_failure_keeps_what_arrived() -> None:
    acc = _acc()
    acc.feed(100.1, _chunk("a", cum=1))
    rec = acc.fail(100.5, ErrorKind.TIMEOUT, "no bytes for 0.4s")
    assert rec.error == ErrorKind.TIMEOUT
    assert list(rec.chunk_times) == [100.1] and rec.done == 100.5


def test_completions_dialect_counts_text() -> None:
    rec = RequestRecord("r", "v", "m")
    acc = StreamAccumulator(rec, get_dialect("openai-completions"))
    acc.on_sent(1.0)
    acc.feed(1.5, b'data: {"choices":[{"text":" a","finish_reason":null}]}\n\n')
    acc.feed(1.6, b'data: {"choices":[{"text":"","finish_reason":"length"}]}\n\ndata: [DONE]\n\n')
    rec = acc.finish(1.6)
    assert rec.ok and list(rec.chunk_tokens) == [1] and rec.ttft == pytest.approx(0.5)


def test_reasoning_tokens_count_for_ttft() -> None:
    acc = _acc()
    acc.feed(100.3, b'data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}\n\n')
    acc.feed(100.4, DONE)
    assert acc.finish(100.4).ttft == pytest.approx(0.3)


def test_queue_delay_and_tpot_edge_cases() -> None:
    rec = RequestRecord("r", "v", "m", scheduled=9.5, sent=10.0)
    assert rec.queue_delay == pytest.approx(0.5)
    assert rec.tpot is None and rec.ttft is None
    rec.chunk_times, rec.chunk_tokens = array("d", [10.1]), array("l", [1])
    assert rec.tpot is None  # one chunk: no inter-token time exists


def test_queue_delay_runs_to_the_connect_start_and_the_connect_is_apart() -> None:
    # Due at 9.5, a sender free at 9.7 opened a connection (0.2 s) and a TLS session (0.1 s), wrote at 10.0.
    rec = RequestRecord("r", "v", "m", scheduled=9.5, sent=10.0, connect_s=0.2, tls_s=0.1)
    assert rec.queue_delay == pytest.approx(0.2)
    rec.chunk_times, rec.chunk_tokens, rec.done = array("d", [10.4]), array("l", [1]), 11.0
    assert rec.ttft == pytest.approx(0.4) and rec.ttft_from_schedule == pytest.approx(0.9)
    assert rec.e2e_from_schedule == pytest.approx(1.5)
    closed = RequestRecord("r", "v", "m", sent=10.0, done=11.0)
    assert closed.queue_delay is None and closed.ttft_from_schedule is None and closed.e2e_from_schedule is None


def test_tpot_leaves_out_the_eos_token_that_usage_counts_and_no_chunk_carried() -> None:
    # Ten one-token chunks 10 ms apart, then a final chunk with empty text: usage says 11 (the EOS token).
    acc = _acc()
    acc.feed(100.1, _chunk(role=True))
    for i in range(10):
        acc.feed(100.2 + i * 0.01, _chunk(content=f"t{i}"))
    acc.feed(100.3, _chunk(content="", finish="stop"))
    acc.feed(100.3, b'data: {"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":11,"total_tokens":21}}\n\n')
    acc.feed(100.3, DONE)
    rec = acc.finish(100.3)
    assert rec.token_source == TokenSource.ONE_PER_CHUNK and rec.output_token_count == 11
    assert rec.tpot == pytest.approx(0.09 / 9)  # nine gaps between ten tokens, not 0.09 / 10
