"""What the anthropic-messages fixtures (tests/unit/streams/anthropic-messages-*.txt, whose timings, counts and cuts
test_dialects_streams.py checks with every dialect's) tell beyond those: which chunks were thinking or a tool call's
input, the cached part of the prompt, a stream without its message_stop, and what a session keeps of the reply."""

from __future__ import annotations

import pytest

from loadgen.measure.records import ErrorKind, RequestRecord, TokenSource
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect

from .test_dialects_streams import SENT, STREAMS, event_ends, run, t

DIALECT = "anthropic-messages"
FIXTURE = "anthropic-messages-api-thinking-tool.txt"


def test_which_chunks_were_thinking_and_tool_input_and_the_cached_prompt() -> None:
    rec, _ = run(DIALECT, (STREAMS / FIXTURE).read_bytes())
    assert list(rec.reasoning_chunks or []) == [0, 1]  # the two thinking deltas
    assert list(rec.tool_call_chunks or []) == [4, 5]  # the tool's two non-empty input pieces
    assert rec.cached_prompt_tokens == 2048 and rec.prompt_tokens == 412 + 2048
    assert rec.token_source == TokenSource.USAGE_SPREAD and rec.server_timings is None


def test_the_error_event_keeps_the_timings_before_it() -> None:
    rec, acc = run(DIALECT, (STREAMS / "anthropic-messages-error.txt").read_bytes())
    assert rec.error == ErrorKind.SERVER_ERROR and rec.error_detail == "overloaded_error: Overloaded"
    assert list(rec.chunk_times) == [pytest.approx(t(3)), pytest.approx(t(4))] and not acc.saw_done


def test_a_stream_without_message_stop_is_interrupted() -> None:
    body = (STREAMS / FIXTURE).read_bytes()
    ends = event_ends(body, "sse")
    rec, acc = run(DIALECT, body[: ends[-2]])  # message_delta came, message_stop did not
    assert rec.error == ErrorKind.STREAM_INTERRUPTED and not acc.saw_done
    assert rec.output_tokens == 89 and len(rec.chunk_tokens) == 6


def test_a_session_keeps_the_answer_and_the_call() -> None:
    body = (STREAMS / FIXTURE).read_bytes()
    rec = RequestRecord("r", "v", "chat")
    acc = StreamAccumulator(rec, get_dialect(DIALECT), keep_text=True)
    acc.on_sent(SENT)
    acc.feed(t(1), body)
    acc.finish(t(2))
    assert rec.output_text == "Let me check the weather."
    assert rec.tool_call_reply == {
        "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6",
        "name": "get_weather",
        "arguments": '{"location": "San Francisco, CA"}',
    }
