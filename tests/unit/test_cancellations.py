"""Requests the client gives up (`traffic.cancel`): the config, the seeded draw that keeps variants paired, the
stream given up at its count of tokens, and what the aggregate and the report make of a given-up request."""

from __future__ import annotations

import textwrap
from array import array

import orjson
import pytest

from loadgen.config.cancel import Cancel, CancelPlan
from loadgen.config.errors import ConfigError
from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.goodput import goodput_misses
from loadgen.measure.records import RequestRecord
from loadgen.protocol.accumulator import StreamAccumulator
from loadgen.protocol.dialects import get_dialect
from loadgen.report import build_report, render_markdown

from ..report_schema import checked

_VARIANT = "variants:\n  - {name: v, base_url: 'http://h:1', model: m}\n"


def _issues(text: str) -> dict[str, str]:
    with pytest.raises(ConfigError) as err:
        parse_scenario(textwrap.dedent(text), "s.yaml")
    return {i.path: i.message for i in err.value.issues}


def test_cancel_takes_a_share_and_a_count_or_a_time() -> None:
    sc = parse_scenario(_VARIANT + "traffic: {cancel: {share: 0.1, after_tokens: [5, 50]}}\n")
    assert sc.traffic.cancel == Cancel(share=0.1, after_tokens=(5, 50))
    timed = parse_scenario(_VARIANT + "traffic: {cancel: {share: 0.5, after: [200ms, 2s]}}\n").traffic.cancel
    assert timed is not None and timed.after == (0.2, 2.0)
    assert parse_scenario(_VARIANT).traffic.cancel is None


@pytest.mark.parametrize(
    ("cancel", "path", "words"),
    [
        ("{share: 0.1}", "traffic.cancel.after_tokens", "exactly one of after_tokens or after"),
        ("{share: 0.1, after_tokens: [5, 9], after: [1, 2]}", "traffic.cancel.after_tokens", "exactly one"),
        ("{share: 0, after_tokens: [5, 9]}", "traffic.cancel.share", "greater than 0"),
        ("{share: 0.1, after_tokens: [9, 5]}", "traffic.cancel.after_tokens", "min <= max"),
        ("{share: 0.1, after: [2, 1]}", "traffic.cancel.after", "0 < min <= max"),
        ("{share: 0.1, after_tokens: [5, 9], every: 3}", "traffic.cancel.every", ""),
    ],
)
def test_each_cancel_mistake_names_its_field(cancel: str, path: str, words: str) -> None:
    issues = _issues(_VARIANT + f"traffic: {{cancel: {cancel}}}\n")
    assert path in issues and words in issues[path], issues


def test_whole_replies_can_be_given_up_by_time_only() -> None:
    whole = "variants:\n  - {name: w, base_url: 'http://h:1', model: m, stream: false}\n"
    issues = _issues(whole + "traffic: {cancel: {share: 0.1, after_tokens: [5, 9]}}\n")
    assert "no token comes before its whole reply" in issues["traffic.cancel.after_tokens"]
    parse_scenario(whole + "traffic: {cancel: {share: 0.1, after: [1s, 2s]}}\n")


def test_the_draw_is_the_requests_own_the_same_for_every_variant() -> None:
    plan = CancelPlan(Cancel(share=0.2, after_tokens=(5, 9)), seed=7)
    draws = [plan.draw(3, i, 0) for i in range(5000)]
    assert draws == [CancelPlan(Cancel(share=0.2, after_tokens=(5, 9)), seed=7).draw(3, i, 0) for i in range(5000)]
    given_up = [d for d in draws if d is not None]
    assert abs(len(given_up) / 5000 - 0.2) < 0.02
    assert {n for _, n in given_up} == {5, 6, 7, 8, 9} and {k for k, _ in given_up} == {"tokens"}
    other_seed = CancelPlan(Cancel(share=0.2, after_tokens=(5, 9)), seed=8)
    assert draws[:50] != [other_seed.draw(3, i, 0) for i in range(50)]
    timed = CancelPlan(Cancel(share=1.0, after=(0.2, 2.0)), seed=7)
    seconds = [timed.draw(0, i, 1) for i in range(500)]
    assert all(d is not None and d[0] == "seconds" and 0.2 <= d[1] <= 2.0 for d in seconds)


def _chunk(content: str, cum: int, finish: str | None = None) -> bytes:
    obj = {"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]}
    obj["usage"] = {"prompt_tokens": 10, "completion_tokens": cum, "total_tokens": 10 + cum}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def test_a_stream_is_given_up_at_the_chunk_that_reaches_its_count() -> None:
    acc = StreamAccumulator(RequestRecord("r", "v", "chat"), get_dialect("openai-chat"))
    acc.give_up_after(5)
    assert acc.make_chunk_counter() is None  # read in Python, which sees every chunk
    acc.on_sent(100.0)
    acc.feed(100.2, _chunk("a b", 2))
    acc.feed(100.3, _chunk("c d", 4))
    assert not acc.fatal
    acc.feed(100.4, _chunk("e f", 6) + _chunk("g", 7))  # reached mid-read: the rest of the read came with it
    assert acc.fatal and acc.cancelled  # the reader stops here
    rec = acc.finish(100.5)
    assert rec.cancelled and rec.error is None and rec.done == 100.4
    assert list(rec.chunk_tokens) == [2, 2, 2, 1] and rec.ttft == pytest.approx(0.2) and rec.output_tokens == 7
    # The chunk that ends the reply is not given up: the request completed.
    done = StreamAccumulator(RequestRecord("r", "v", "chat"), get_dialect("openai-chat"))
    done.give_up_after(3)
    done.feed(100.2, _chunk("a b c", 3, finish="length") + b"data: [DONE]\n\n")
    rec = done.finish(100.3)
    assert not rec.cancelled and rec.error is None and rec.output_tokens == 3
    # Nor one whose end came in the same read as the chunk that reached the count: it was whole already.
    whole = StreamAccumulator(RequestRecord("r", "v", "chat"), get_dialect("openai-chat"))
    whole.give_up_after(2)
    whole.feed(100.2, _chunk("a b", 2) + _chunk("c", 3, finish="length") + b"data: [DONE]\n\n")
    rec = whole.finish(100.3)
    assert not rec.cancelled and rec.error is None and list(rec.chunk_tokens) == [2, 1] and rec.done == 100.2


def _given_up(i: int, tokens: int) -> RequestRecord:
    sent = 100.0 + i
    times = array("d", [sent + 0.1 + 0.01 * k for k in range(tokens)])
    rec = RequestRecord(f"w0-v-0-{i}", "v", "chat", sent=sent, chunk_times=times, chunk_tokens=array("l", [1] * tokens))
    rec.done, rec.cancelled = (times[-1] if tokens else sent + 0.05), "tokens"
    return rec


def test_given_up_requests_are_apart_from_successes_and_errors() -> None:
    agg = Aggregate(window_start=0.0)
    for i in range(20):
        ok = _given_up(i, 10)
        ok.cancelled, ok.output_tokens = "", 10
        agg.add(ok, 0.0)
    agg.add(_given_up(20, 4), 0.0)
    agg.add(_given_up(21, 0), 0.0)  # given up before its first token: a censored TTFT (it did not come fast)
    g = agg.merged_variant("v")
    assert (g.requests, g.ok, g.cancelled, g.errors) == (20, 20, 2, {})
    assert g.fates == {"succeeded": 20, "cancelled_by_tokens": 2}
    # Its end is not known: censored in E2E and TPOT (above every measured one), never dropped; its first token
    # measured.
    assert g.hists["ttft"].count == 21 and g.hists["e2e"].count == 20 and g.censored == {"e2e": 2, "ttft": 1, "tpot": 2}
    assert g.output_tokens == 204  # its streamed tokens count for throughput
    # Judged for goodput: an E2E it never reached misses its bound; a TTFT it had is judged as it was.
    assert goodput_misses(_given_up(0, 4), {"e2e": 1e6}) == ("e2e",)
    assert goodput_misses(_given_up(0, 4), {"ttft": 1e6}) == ()
    assert g.window_requests == 22
    report = checked(build_report(parse_scenario(_VARIANT), agg, 10.0))
    overall = report["variants"][0]["overall"]
    assert overall["cancelled"] == 2 and overall["success_rate"] == 1.0
    assert overall["metrics_ms"]["e2e"]["p99"] is None  # two of 22 censored: the p99 lies among them
    assert "cancelled by the client mid-reply (`traffic.cancel`): v 2" in render_markdown(report)
    row = _given_up(3, 4).to_json()
    assert row["cancelled"] == "tokens" and RequestRecord.from_json(row).cancelled == "tokens"
    assert RequestRecord.from_json(row | {"cancelled": True}).cancelled == "tokens"  # a row of an older shard
