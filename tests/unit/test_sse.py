from __future__ import annotations

import pytest

from loadgen.protocol.sse import SSEEvent, SSEParser

STREAM = (
    b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}\n\n'
    b": keep-alive\n\n"
    b'data: {"choices":[{"delta":{"content":" hi"}}]}\n\n'
    b"event: message\ndata: line1\ndata: line2\n\n"
    b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}\n\n'
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SSEEvent(b'{"choices":[{"delta":{"role":"assistant","content":""}}]}'),
    SSEEvent(b'{"choices":[{"delta":{"content":" hi"}}]}'),
    SSEEvent(b"line1\nline2", "message"),
    SSEEvent(b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1}}'),
    SSEEvent(b"[DONE]"),
]


def _feed_all(parser: SSEParser, pieces: list[bytes]) -> list[SSEEvent]:
    out: list[SSEEvent] = []
    for p in pieces:
        out += parser.feed(p)
    return out


def test_whole_stream_in_one_read() -> None:
    p = SSEParser()
    assert p.feed(STREAM) == EXPECTED
    assert p.comments == 1
    assert p.close() == ([], b"")


@pytest.mark.parametrize("newline", [b"\r\n", b"\r"])
def test_crlf_and_cr_line_ends(newline: bytes) -> None:
    p = SSEParser()
    assert p.feed(STREAM.replace(b"\n", newline)) == EXPECTED


def test_every_two_way_split_gives_the_same_events() -> None:
    for crlf in (False, True):
        stream = STREAM.replace(b"\n", b"\r\n") if crlf else STREAM
        for cut in range(len(stream) + 1):
            assert _feed_all(SSEParser(), [stream[:cut], stream[cut:]]) == EXPECTED, (crlf, cut)


def test_byte_by_byte_with_crlf_split_between_reads() -> None:
    stream = STREAM.replace(b"\n", b"\r\n")
    assert _feed_all(SSEParser(), [stream[i : i + 1] for i in range(len(stream))]) == EXPECTED


def test_data_without_space_and_empty_data_field() -> None:
    p = SSEParser()
    assert p.feed(b"data:x\n\ndata:\n\n") == [SSEEvent(b"x"), SSEEvent(b"")]


def test_block_with_only_comments_or_id_dispatches_nothing() -> None:
    p = SSEParser()
    assert p.feed(b": ping\n\nid: 7\nretry: 100\n\n") == []
    assert p.comments == 1


def test_error_event_name_is_kept() -> None:
    p = SSEParser()
    assert p.feed(b'event: error\ndata: {"error":"boom"}\n\n') == [SSEEvent(b'{"error":"boom"}', "error")]


def test_truncated_stream_returns_partial_bytes() -> None:
    p = SSEParser()
    assert p.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"choi') == [
        SSEEvent(b'{"choices":[{"delta":{"content":"a"}}]}')
    ]
    events, leftover = p.close()
    assert events == []
    assert leftover == b'data: {"choi'


def test_extra_blank_lines_between_events() -> None:
    p = SSEParser()
    assert p.feed(b"data: a\n\n\n\ndata: b\n\n") == [SSEEvent(b"a"), SSEEvent(b"b")]


def test_bytes_received_counts_everything() -> None:
    p = SSEParser()
    p.feed(STREAM[:10])
    p.feed(STREAM[10:])
    assert p.bytes_received == len(STREAM)
