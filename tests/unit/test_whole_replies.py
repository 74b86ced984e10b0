"""Whole (non-streamed) replies, `variants[].stream: false`: the config's refusals, the body the OpenAI dialects
build, the reply read into a record (protocol/whole_reply.py) through the connection's parser, and what the
aggregate, the comparison and the reports make of such records (E2E and usage tokens; no TTFT, ITL or TPOT)."""

from __future__ import annotations

import textwrap
from array import array
from types import SimpleNamespace

import orjson
import pytest

from loadgen.client.connection import _Parser
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.goodput import NO_TOKENS, goodput_misses
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.protocol.dialects import dialect_for
from loadgen.protocol.whole_reply import MAX_REPLY_BYTES, WholeReplyAccumulator
from loadgen.report import build_report, render_markdown
from loadgen.report.html import render_html

from ..report_schema import checked

_CHAT = dialect_for("openai-chat", None, stream=False)
_SPEC = SimpleNamespace(system_prompt="be brief", prompt="hello there", max_tokens=32)
_REPLY = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi you"}, "finish_reason": "length"}],
    "usage": {
        "prompt_tokens": 12,
        "completion_tokens": 32,
        "total_tokens": 44,
        "prompt_tokens_details": {"cached_tokens": 8},
    },
}


def _issues(variant: str, rest: str = "") -> dict[str, str]:
    text = f"variants:\n  - {{name: w, base_url: 'http://127.0.0.1:1', model: m, {variant}}}\n{rest}"
    with pytest.raises(ConfigError) as err:
        parse_scenario(textwrap.dedent(text), "s.yaml")
    return {i.path: i.message for i in err.value.issues}


# --- configuration ------------------------------------------------------------------------------------------------


def test_stream_false_is_a_variant_field_the_openai_dialects_take() -> None:
    sc = parse_scenario("variants:\n  - {name: w, base_url: 'http://h:1', model: m, stream: false}\n")
    assert sc.variants[0].stream is False
    comp = parse_scenario(
        "variants:\n  - {name: w, base_url: 'http://h:1', model: m, stream: false, dialect: openai-completions}\n"
    )
    assert comp.variants[0].stream is False
    assert parse_scenario("variants:\n  - {name: s, base_url: 'http://h:1', model: m}\n").variants[0].stream


@pytest.mark.parametrize(
    ("variant", "path", "words"),
    [
        ("stream: false, dialect: tgi", "variants[0].stream", "tgi requests are always streamed"),
        ("stream: false, dialect: ollama-chat", "variants[0].stream", "stream: false is for openai-chat"),
        ("extra_body: {stream: false}", "variants[0].extra_body.stream", "the variant's own `stream` field"),
        ("extra_body: {stream: true}", "variants[0].extra_body.stream", "the variant's own `stream` field"),
        ("stream: false, continuous_usage_stats: true", "variants[0].continuous_usage_stats", "stream is false"),
        (
            "stream: false, extra_body: {stream_options: {include_usage: true}}",
            "variants[0].extra_body.stream_options",
            "only for a stream",
        ),
    ],
)
def test_each_mistake_names_its_field(variant: str, path: str, words: str) -> None:
    issues = _issues(variant)
    assert path in issues, issues
    assert words in issues[path]


def test_slos_and_goodput_that_whole_replies_cannot_meet_are_refused() -> None:
    rest = "slos:\n  - {metric: ttft, stat: p99, max_ms: 500, variant: w}\n  - {metric: e2e, stat: p99, max_ms: 900}\n"
    issues = _issues("stream: false", rest + "goodput: {ttft_ms: 500, e2e_ms: 900}\n")
    assert "no ttft to judge" in issues["slos[0].metric"]
    assert "would meet this bound" in issues["goodput.ttft_ms"]
    assert "slos[1].metric" not in issues and "goodput.e2e_ms" not in issues
    # An SLO for every variant (the defaults' TTFT p99 among them) is judged on the streamed ones: accepted.
    parse_scenario("variants:\n  - {name: w, base_url: 'http://h:1', model: m, stream: false}\ngoodput: {e2e_ms: 9}\n")


# --- the request ----------------------------------------------------------------------------------------------------


def test_the_body_asks_for_a_whole_reply_without_stream_options() -> None:
    body = orjson.loads(_CHAT.build_body(_SPEC, "m", False, {"ignore_eos": True}))
    assert body["stream"] is False and "stream_options" not in body
    assert body["max_tokens"] == 32 and body["min_tokens"] == 32  # exact_output still asks for exactly that many
    assert _CHAT.accept == "application/json" and _CHAT.stream is False
    capped = orjson.loads(dialect_for("openai-chat", "max_completion_tokens", stream=False).build_body(_SPEC, "m", 0))
    assert capped["max_completion_tokens"] == 32 and capped["stream"] is False
    comp = orjson.loads(dialect_for("openai-completions", stream=False).build_body(_SPEC, "m", True))
    assert comp["prompt"] == "be brief hello there" and comp["stream"] is False and "stream_options" not in comp
    streamed = orjson.loads(dialect_for("openai-chat").build_body(_SPEC, "m", False))
    assert streamed["stream"] is True and streamed["stream_options"] == {"include_usage": True}
    with pytest.raises(ValueError, match="tgi requests are always streamed"):
        dialect_for("tgi", stream=False)


# --- the reply, read through the connection's parser --------------------------------------------------------------


def _read(body: bytes, pieces: list[int], chunked: bool = False, keep_text: bool = False) -> RequestRecord:
    """`body` answered with Content-Length (or chunked), cut into reads at `pieces`, through the connection's parser
    into a whole-reply accumulator; the record as the request stream finishes it."""
    if chunked:
        framed = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    else:
        framed = body
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    raw = head + framed
    rec = RequestRecord("r-1", "w", "chat", sent=10.0)
    acc = WholeReplyAccumulator(rec, _CHAT, keep_text=keep_text)
    parser = _Parser(acc)
    assert acc.make_chunk_counter() is None  # never a C fast half: both read paths take these bytes in Python
    cuts = [0, *pieces, len(raw)]
    done = False
    for k, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False)):
        done = parser.on_read(10.5 + 0.01 * k, raw[a:b])
    assert done and parser.message_complete
    return acc.finish(10.5 + 0.01 * (len(cuts) - 2))


def test_a_reply_read_in_any_cut_gives_the_same_record() -> None:
    body = orjson.dumps(_REPLY)
    raw_len = len(body) + 90
    seen = set()
    for chunked in (False, True):
        for cut in range(1, raw_len, 7):
            rec = _read(body, [cut] if cut < raw_len - 1 else [], chunked=chunked)
            assert rec.error is None, rec.error_detail
            assert rec.streamed is False and not rec.chunk_times and rec.ttft is None and rec.tpot is None
            seen.add((rec.output_tokens, rec.prompt_tokens, rec.cached_prompt_tokens, rec.finish_reason))
            assert rec.token_source == "usage" and rec.e2e == pytest.approx(rec.done - 10.0)
    assert seen == {(32, 12, 8, "length")}
    kept = _read(body, [40], keep_text=True)
    assert kept.output_text == "hi you"
    assert _read(body, [40]).output_text == ""  # text only when asked for


@pytest.mark.parametrize(
    ("body", "error", "words"),
    [
        (b'{"error": {"message": "boom", "type": "InternalServerError"}}', ErrorKind.SERVER_ERROR, "boom"),
        (b"<html>proxy</html>", ErrorKind.MALFORMED, "not a JSON reply"),
        (b'data: {"choices": []}\n\n', ErrorKind.MALFORMED, "the server streamed though stream: false"),
        (b'{"choices": "x"}', ErrorKind.MALFORMED, "no choice"),
        (b'{"choices": [{"message": ', ErrorKind.MALFORMED, "malformed JSON"),
    ],
)
def test_a_reply_that_is_not_one_fails_with_its_class(body: bytes, error: str, words: str) -> None:
    rec = _read(body, [30])
    assert rec.error == error and words in rec.error_detail, rec.error_detail
    assert rec.partial_bytes == body[:2048]


def test_without_usage_the_tokens_are_uncounted_and_an_oversized_body_fails() -> None:
    reply = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}
    rec = _read(orjson.dumps(reply), [20])
    assert rec.error is None and rec.output_tokens is None and rec.token_source == "uncounted"
    big = WholeReplyAccumulator(RequestRecord("r", "w", "chat"), _CHAT)
    big.feed(1.0, b"{" + b" " * MAX_REPLY_BYTES)
    assert big.fatal and big.record.error == ErrorKind.MALFORMED and "MiB" in big.record.error_detail


# --- what is measured of them ---------------------------------------------------------------------------------------


def _whole(i: int, e2e: float, tokens: int = 30, error: str | None = None, variant: str = "w") -> RequestRecord:
    rec = RequestRecord(f"w0-{variant}-0-{i}", variant, "chat", sent=100.0 + i, error=error, streamed=False)
    rec.done = rec.sent + e2e
    if error is None:
        rec.output_tokens, rec.prompt_tokens, rec.token_source = tokens, 20, "usage"
    return rec


def _streamed(i: int, e2e: float, n: int = 30) -> RequestRecord:
    sent = 100.0 + i
    times = array("d", [sent + 0.05 + (e2e - 0.05) * k / (n - 1) for k in range(n)])
    rec = RequestRecord(f"w0-s-0-{i}", "s", "chat", sent=sent, chunk_times=times, chunk_tokens=array("l", [1] * n))
    rec.done, rec.output_tokens, rec.prompt_tokens = times[-1], n, 20
    return rec


def test_the_aggregate_times_e2e_and_counts_usage_tokens_but_no_ttft() -> None:
    agg = Aggregate(window_start=0.0)
    for i in range(10):
        agg.add(_whole(i, 0.5 + 0.01 * i), 0.0)
    agg.add(_whole(10, 0.2, error=ErrorKind.HTTP_5XX), 0.0)
    g = agg.merged_variant("w")
    assert g.ok == 10 and g.output_tokens == 300 and g.ok_without_tokens == 0
    assert g.hists["e2e"].count == 10 and g.censored == {"e2e": 1}  # the failure: E2E censored, TTFT not measured
    assert not {"ttft", "itl", "icl", "tpot"} & set(g.hists)
    assert sum(b.output_tokens for b in agg.variant_timeline.bins["w"].values()) == 300  # the timeline's add up too
    late = Aggregate(window_start=0.0)
    late.window_end = 100.3
    late.add(_whole(0, 0.5), 0.0)  # completed in the drain after the window: its tokens arrived outside it
    assert late.merged_variant("w").output_tokens == 0
    assert goodput_misses(_whole(0, 0.5), {"e2e": 400.0}) == ("e2e",)
    assert goodput_misses(_whole(0, 0.3), {"e2e": 400.0}) == ()
    assert goodput_misses(_whole(0, 0.3, tokens=0), {"e2e": 400.0}) == (NO_TOKENS,)


def test_the_report_compares_a_streamed_and_a_whole_variant_on_e2e_only() -> None:
    scenario = parse_scenario(
        "variants:\n  - {name: s, base_url: 'http://h:1', model: m}\n"
        "  - {name: w, base_url: 'http://h:1', model: m, stream: false}\n"
    )
    agg = Aggregate(window_start=0.0)
    for i in range(60):
        agg.add(_streamed(i, 1.0 + 0.001 * i), 0.0)
        agg.add(_whole(i, 0.5 + 0.0005 * i), 0.0)
    report = checked(build_report(scenario, agg, 100.0))
    s, w = report["variants"]
    assert s["streamed"] is True and w["streamed"] is False
    assert set(w["overall"]["metrics_ms"]) == {"e2e"} and "ttft" in s["overall"]["metrics_ms"]
    assert w["overall"]["token_count_source"] == {"usage": 60}
    entries = [e for e in report["comparison"] if e["variant"] == "w"]
    assert {e["metric"] for e in entries} == {"e2e"} and all(e["paired"] for e in entries)
    assert entries[0]["speedup"] == pytest.approx(2.0, rel=0.01)
    assert set(w["speedup_vs_baseline"]) == {"e2e_p50", "e2e_p99"}
    judged = {(x["variant"], x["metric"]) for x in report["slos"]}
    assert ("s", "ttft") in judged and ("w", "ttft") not in judged and ("w", "e2e") in judged
    md = render_markdown(report)
    assert "| w | SLOs met | 60 |" in md and "| not measured | not measured |" in md
    assert "Whole replies (w): TTFT, ITL, ICL and TPOT not measured" in md
    assert "whole replies (stream: false): output tokens from each reply's usage" in md
    html = render_html(report)
    assert "<td>not measured</td>" in html and "Whole replies (w)" in html
