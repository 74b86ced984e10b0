"""Every dialect against byte streams of its server's real response shape (tests/unit/streams/<dialect>-<case>.txt).

Each fixture is a response body exactly as it comes off the wire (after HTTP de-chunking). Timestamps are synthetic:
event i (an SSE block, or an NDJSON line) arrives at `t(i) = SENT + 0.100 + 0.010 * i`, and the body ends at
`t(number of events)`. Every read is stamped with the arrival time of its last byte, so cutting the body anywhere
must not change the record: each fixture is fed whole-events-at-a-time, cut at every byte boundary, and byte by byte.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from loadgen.measure.records import ErrorKind, RequestRecord, TokenSource
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect

STREAMS = Path(__file__).parent / "streams"
SENT = 100.0
EOF_DONE = -1  # `done_event`: the stream ends with the body (or an error), not at an event


def t(i: int) -> float:
    return SENT + 0.100 + 0.010 * i


def event_ends(body: bytes, framing: str) -> list[int]:
    sep = b"\n\n" if framing == "sse" else b"\n"
    ends, pos = [], 0
    while (j := body.find(sep, pos)) >= 0:
        pos = j + len(sep)
        ends.append(pos)
    if pos < len(body):
        ends.append(len(body))  # an unterminated tail belongs to one more event
    return ends


def run(dialect: str, body: bytes, cuts: Iterable[int] = ()) -> tuple[RequestRecord, StreamAccumulator]:
    d = get_dialect(dialect)
    rec = RequestRecord("r", "v", "chat")
    acc = StreamAccumulator(rec, d)
    acc.on_sent(SENT)
    ends = event_ends(body, d.framing)
    prev = 0
    for b in sorted(set(ends) | {c for c in cuts if 0 < c < len(body)}):
        acc.feed(t(bisect.bisect_right(ends, b - 1)), body[prev:b])
        prev = b
    acc.finish(t(len(ends)))
    return rec, acc


def snapshot(rec: RequestRecord, acc: StreamAccumulator) -> tuple[Any, ...]:
    return (
        rec.chunk_times,
        rec.chunk_tokens,
        rec.error,
        rec.error_detail,
        rec.output_tokens,
        rec.prompt_tokens,
        rec.token_source,
        rec.server_timings,
        rec.done,
        rec.partial_bytes,
        rec.finish_reason,
        acc.saw_done,
    )


@dataclass
class Case:
    fixture: str
    chunk_events: list[int]  # events that carried tokens
    chunk_tokens: list[int]
    output_tokens: int | None
    prompt_tokens: int | None
    source: str = TokenSource.ONE_PER_CHUNK
    done_event: int = EOF_DONE
    error: str | None = None
    detail: str = ""
    timings: dict[str, Any] | None = None  # expected subset of server_timings
    output_count: int | None = None  # what reports use (usage, else the chunk sum)
    finish: str | None = None  # finish_reason, in OpenAI's words

    @property
    def dialect(self) -> str:
        stem = self.fixture.removesuffix(".txt")
        names = ("openai-completions", "openai-chat", "openai-responses", "anthropic-messages", "ollama-chat")
        for name in (*names, "ollama-generate"):
            if stem.startswith(name + "-"):
                return name
        return stem.split("-")[0]


CASES = [
    # vLLM with continuous_usage_stats: 3 tokens in one chunk (speculative decoding), a chunk held back for a
    # multibyte character (empty content, count advanced), EOS in an empty chunk whose count advanced.
    Case(
        "openai-chat-vllm-continuous.txt",
        [1, 2, 3, 4, 5],
        [1, 3, 1, 1, 1],
        7,
        17,
        TokenSource.SERVER,
        done_event=7,
        finish="stop",
    ),
    # Hosted API / SGLang without per-chunk counts: a comment, a role chunk, an empty-content chunk (not a token),
    # EOS as `finish_reason: stop` with an empty delta (not a token), usage in a final chunk with empty choices.
    # Its total (5) is more than the chunks (3) and EOS: spread over them, the remainder on the later ones.
    Case(
        "openai-chat-eos-no-content.txt",
        [2, 3, 5],
        [1, 2, 2],
        5,
        12,
        TokenSource.USAGE_SPREAD,
        done_event=8,
        finish="stop",
    ),
    # llama.cpp's OAI server with timings_per_token: cumulative timings.predicted_n; a held-back emoji (2 tokens).
    Case(
        "openai-chat-llamacpp-timings.txt",
        [1, 2, 3, 4],
        [1, 1, 2, 1],
        6,
        12,
        TokenSource.SERVER,
        done_event=7,
        timings={"predicted_n": 6, "predicted_per_token_ms": 8.6, "prompt_ms": 35.2},
        finish="stop",
    ),
    # Older llama.cpp: usage and timings only on the last chunk that still has choices; its totals must not be
    # counted as tokens of that chunk.
    Case(
        "openai-chat-llamacpp-final-usage.txt",
        [0, 1, 2, 3],
        [1, 1, 1, 1],
        5,
        9,
        done_event=5,
        timings={"predicted_n": 5, "predicted_ms": 48.0},
        finish="stop",
    ),
    # llama.cpp's `error:` SSE field mid-stream.
    Case(
        "openai-chat-error-field.txt",
        [0, 1],
        [1, 1],
        None,
        None,
        error=ErrorKind.SERVER_ERROR,
        detail="failed to decode the batch",
    ),
    # vLLM's error object mid-stream (the later [DONE] is ignored).
    Case(
        "openai-chat-error-data.txt",
        [1],
        [1],
        None,
        None,
        error=ErrorKind.SERVER_ERROR,
        detail="InternalServerError: The engine loop has stopped",
    ),
    Case("openai-completions-trtllm.txt", [0, 1, 2, 3], [1, 1, 1, 1], 4, 7, done_event=5, finish="length"),
    # TGI native: index = cumulative count; a keep-alive comment; an empty-text token (incomplete character) is a
    # token; EOS is a special token in the final event with details.
    Case("tgi-eos.txt", [0, 1, 3, 4, 5], [1, 1, 1, 1, 1], 5, 11, TokenSource.SERVER, done_event=5, finish="stop"),
    Case(
        "tgi-error.txt",
        [0],
        [1],
        None,
        None,
        TokenSource.SERVER,
        error=ErrorKind.SERVER_ERROR,
        detail="generation: Request failed during generation: Server error: CUDA out of memory",
    ),
    # Triton + TensorRT-LLM: no end marker, the complete body is the end; an empty final response is no token.
    Case("triton-trtllm.txt", [0, 1, 2, 3], [1, 1, 1, 1], None, None, output_count=4),
    # Triton + vLLM backend with return_num_*_tokens / return_finish_reason: per-response counts, a held-back
    # character (empty text, 1 token), the response with a finish_reason ends the stream.
    Case(
        "triton-vllm-counts.txt",
        [0, 1, 2, 3, 4],
        [1, 3, 1, 1, 1],
        None,
        8,
        TokenSource.SERVER,
        done_event=4,
        output_count=7,
        finish="length",
    ),
    Case(
        "triton-error.txt",
        [0],
        [1],
        None,
        None,
        error=ErrorKind.SERVER_ERROR,
        detail="an illegal memory access was encountered",
    ),
    # llama.cpp native with timings_per_token: tokens_predicted is cumulative; " café" arrives with 2 tokens
    # (held back for the multibyte character); EOS is an empty chunk whose count advanced.
    Case(
        "llamacpp-timings-per-token.txt",
        [0, 1, 2, 3, 4],
        [1, 1, 1, 2, 1],
        6,
        9,
        TokenSource.SERVER,
        done_event=5,
        timings={"prompt_n": 9, "prompt_ms": 21.3, "predicted_n": 6, "predicted_per_token_ms": 12.733},
        finish="stop",
    ),
    # llama.cpp native, n_predict reached, prompt partly cached: tokens_evaluated is the whole prompt.
    Case(
        "llamacpp-limit.txt",
        [0, 1, 2],
        [1, 1, 1],
        3,
        15,
        TokenSource.SERVER,
        done_event=3,
        timings={"cache_n": 12, "prompt_n": 3, "predicted_per_token_ms": 8.2},
        finish="length",
    ),
    Case(
        "llamacpp-error-field.txt",
        [0],
        [1],
        None,
        None,
        TokenSource.SERVER,
        error=ErrorKind.SERVER_ERROR,
        detail="Context size has been exceeded.",
    ),
    Case(
        "llamacpp-error-data.txt",
        [0],
        [1],
        None,
        None,
        TokenSource.SERVER,
        error=ErrorKind.SERVER_ERROR,
        detail="exceed_context_size_error: the request exceeds the available context size",
    ),
    Case(
        "ollama-chat-basic.txt",
        [0, 1, 2, 3],
        [1, 1, 1, 1],
        5,
        26,
        done_event=4,
        timings={
            "prompt_n": 26,
            "prompt_ms": 130.0,
            "predicted_n": 5,
            "predicted_ms": 350.0,
            "predicted_per_token_ms": 70.0,
            "total_ms": 512.345678,
            "load_ms": 12.345678,
        },
        finish="stop",
    ),
    Case(
        "ollama-chat-error.txt",
        [0, 1],
        [1, 1],
        None,
        None,
        error=ErrorKind.SERVER_ERROR,
        detail="an error was encountered while running the model: unexpected EOF",
    ),
    # Thinking tokens are generated tokens: they set TTFT. eval_count (6) spread over the 4 lines.
    Case(
        "ollama-generate-thinking.txt",
        [0, 1, 2, 3],
        [1, 1, 2, 2],
        6,
        14,
        TokenSource.USAGE_SPREAD,
        done_event=4,
        finish="stop",
        timings={"prompt_ms": 42.0, "predicted_ms": 90.0, "predicted_per_token_ms": 15.0},
    ),
    # The Responses API (dialects/responses.py). llama.cpp, stopped at EOS: only the two answer deltas carry tokens
    # (the opening and closing events none); the usage's 3 is the deltas and EOS (not spread); status completed.
    Case(
        "openai-responses-llamacpp-eos.txt",
        [4, 5],
        [1, 1],
        3,
        38,
        done_event=9,
        timings={"cache_n": 24, "predicted_n": 3, "predicted_per_token_ms": 29.878},
        finish="stop",
    ),
    # llama.cpp with timings_per_token: a cumulative timings.predicted_n in every delta (" café" one token here).
    Case(
        "openai-responses-llamacpp-timings.txt",
        [4, 5, 6, 7, 8],
        [1, 1, 1, 1, 1],
        5,
        35,
        TokenSource.SERVER,
        done_event=12,
        timings={"prompt_n": 35, "predicted_n": 5, "predicted_ms": 83.31},
        finish="stop",
    ),
    # OpenAI: a reasoning summary's deltas (thinking) before the answer's, sequence numbers, and max_output_tokens
    # reached: `response.incomplete` (length), its 8 output tokens spread over the 4 token events.
    Case(
        "openai-responses-openai-incomplete.txt",
        [3, 4, 8, 9],
        [2, 2, 2, 2],
        8,
        20,
        TokenSource.USAGE_SPREAD,
        done_event=13,
        finish="length",
    ),
    # A failed response after two deltas, and an `error` event: both failed requests, classified server_error.
    Case(
        "openai-responses-failed.txt",
        [4, 5],
        [1, 1],
        None,
        None,
        error=ErrorKind.SERVER_ERROR,
        detail="server_error: The model failed to generate a response.",
    ),
    Case(
        "openai-responses-error-event.txt",
        [2],
        [1],
        None,
        None,
        error=ErrorKind.SERVER_ERROR,
        detail="rate_limit_exceeded: Rate limit reached",
    ),
    # vLLM with a tool parser: the call opens with its output_item.added (no token), its arguments come in deltas;
    # completed with a function call in the output: finish reason tool_calls.
    Case(
        "openai-responses-vllm-tool-call.txt",
        [3, 4, 5],
        [4, 5, 5],
        14,
        57,
        TokenSource.USAGE_SPREAD,
        done_event=8,
        finish="tool_calls",
    ),
    # Anthropic's Messages API (dialects/anthropic.py; its marks and cached tokens: test_anthropic_streams.py):
    # thinking, text and a tool call (an empty first input piece and the signature carry no token), 89 output
    # tokens spread over the 6 token chunks; the prompt is input_tokens plus cache reads.
    Case(
        "anthropic-messages-api-thinking-tool.txt",
        [3, 4, 8, 9, 13, 14],
        [14, 15, 15, 15, 15, 15],
        89,
        2460,
        TokenSource.USAGE_SPREAD,
        done_event=17,
        finish="tool_calls",
    ),
    # Overloaded mid-stream (`event: error`): a failed request that keeps its timings.
    Case(
        "anthropic-messages-error.txt",
        [3, 4],
        [1, 1],
        None,
        25,
        error=ErrorKind.SERVER_ERROR,
        detail="overloaded_error: Overloaded",
    ),
]


def test_every_fixture_has_a_case_and_every_dialect_a_fixture() -> None:
    from loadgen.protocol.dialects import DIALECT_NAMES, POOLING_DIALECTS

    on_disk = {p.name for p in STREAMS.glob("*.txt")}
    assert on_disk == {c.fixture for c in CASES}
    # Every dialect that streams (pooling replies come whole: tests/unit/test_pooling.py).
    assert {c.dialect for c in CASES} == set(DIALECT_NAMES) - set(POOLING_DIALECTS)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.fixture.removesuffix(".txt"))
def test_fixture(case: Case) -> None:
    body = (STREAMS / case.fixture).read_bytes()
    rec, acc = run(case.dialect, body)
    n_events = len(event_ends(body, get_dialect(case.dialect).framing))

    assert list(rec.chunk_times) == [pytest.approx(t(i)) for i in case.chunk_events]
    assert list(rec.chunk_tokens) == case.chunk_tokens
    assert rec.ttft == pytest.approx(t(case.chunk_events[0]) - SENT)
    assert rec.output_tokens == case.output_tokens
    assert rec.prompt_tokens == case.prompt_tokens
    output_count = case.output_count if case.output_count is not None else case.output_tokens
    assert rec.output_token_count == (output_count if output_count is not None else sum(case.chunk_tokens))
    assert rec.token_source == case.source
    assert rec.finish_reason == case.finish
    assert rec.error == case.error
    assert case.detail in rec.error_detail
    assert rec.ok == acc.saw_done == (case.error is None)
    done_at = t(n_events) if case.done_event == EOF_DONE else t(case.done_event)
    assert rec.done == pytest.approx(done_at)
    if case.timings is None:
        assert rec.server_timings is None
    else:
        assert rec.server_timings is not None
        assert {k: rec.server_timings.get(k) for k in case.timings} == pytest.approx(case.timings)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.fixture.removesuffix(".txt"))
def test_fixture_cut_anywhere_gives_the_same_record(case: Case) -> None:
    body = (STREAMS / case.fixture).read_bytes()
    expected = snapshot(*run(case.dialect, body))
    for cut in range(len(body) + 1):
        assert snapshot(*run(case.dialect, body, [cut])) == expected, cut
    assert snapshot(*run(case.dialect, body, range(len(body)))) == expected


# --- end of stream: markers, and bodies that stop early ------------------------------------------------------


@pytest.mark.parametrize(
    "fixture",
    [
        "openai-chat-vllm-continuous.txt",
        "tgi-eos.txt",
        "llamacpp-timings-per-token.txt",
        "ollama-chat-basic.txt",
        "triton-trtllm.txt",
    ],
)
def test_body_cut_inside_the_last_event_is_interrupted_and_keeps_its_timings(fixture: str) -> None:
    case = next(c for c in CASES if c.fixture == fixture)
    body = (STREAMS / fixture).read_bytes()
    ends = event_ends(body, get_dialect(case.dialect).framing)
    n = min(20, (ends[-1] - ends[-2]) // 2)
    rec, acc = run(case.dialect, body[: ends[-2] + n])  # the last event's first n bytes
    assert rec.error == ErrorKind.STREAM_INTERRUPTED and not acc.saw_done
    assert rec.partial_bytes == body[ends[-2] : ends[-2] + n].strip()
    assert rec.ttft == pytest.approx(t(case.chunk_events[0]) - SENT)


@pytest.mark.parametrize("fixture", ["tgi-eos.txt", "llamacpp-limit.txt", "ollama-chat-basic.txt"])
def test_body_ending_between_events_without_the_final_one_is_interrupted(fixture: str) -> None:
    case = next(c for c in CASES if c.fixture == fixture)
    body = (STREAMS / fixture).read_bytes()
    ends = event_ends(body, get_dialect(case.dialect).framing)
    rec, acc = run(case.dialect, body[: ends[-2]])
    assert rec.error == ErrorKind.STREAM_INTERRUPTED and not acc.saw_done
    assert rec.partial_bytes == b""


def test_triton_complete_body_is_the_end_even_without_a_final_event() -> None:
    # What a complete body is, the connection knows (chunked terminator); here every whole-event prefix is orderly.
    body = (STREAMS / "triton-trtllm.txt").read_bytes()
    ends = event_ends(body, "sse")
    rec, acc = run("triton", body[: ends[1]])
    assert rec.ok and acc.saw_done and list(rec.chunk_tokens) == [1, 1]
    assert rec.done == pytest.approx(t(2))


def test_ollama_last_line_without_newline_is_still_read() -> None:
    body = (STREAMS / "ollama-chat-basic.txt").read_bytes().rstrip(b"\n")
    for cut in range(len(body) + 1):
        rec, acc = run("ollama-chat", body, [cut])
        assert rec.ok and acc.saw_done, cut
        assert rec.output_tokens == 5 and rec.server_timings is not None
        assert rec.done == pytest.approx(t(5))  # read at the end of the body


def test_records_keep_server_timings_in_their_json_row() -> None:
    rec, _ = run("llamacpp", (STREAMS / "llamacpp-limit.txt").read_bytes())
    row = rec.to_json()
    assert row["server_timings"]["predicted_per_token_ms"] == pytest.approx(8.2)
    assert row["output_tokens"] == 3 and row["prompt_tokens"] == 15
