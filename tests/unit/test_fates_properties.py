"""The fate table's invariants, as properties over generated mixes of fates on paired variants (measure/fates.py).

- No fate can make a variant look better: making a request slower, or ending it earlier by a cut, a cancel (by time
  or by tokens), a timeout or an interruption, never lowers a TTFT / E2E percentile, never raises goodput's share or
  the paired speedup against the baseline.
- Every request is counted exactly once across the fate counters, on a worker, after the wire, and in the report.
- A baseline request of the window is in a pair, with its values or censored, never silently dropped.
- Window membership is by send (open loop: schedule) time, and throughput counts only the tokens inside the window.
- An agent task ended early (a step failed, timed out, cut, given up, or the stop between two steps) is counted once
  by its fate and never lowers its variant's session-duration percentiles, goodput or paired session speedup.

Seeded (`derandomize`): the same examples on every run, so a failure here is a bug, not a draw.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import replace

from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from loadgen.config.scenario import parse_scenario
from loadgen.measure.aggregate import Aggregate
from loadgen.measure.fates import FATES, Fate, fate_of, sent_in_warmup
from loadgen.measure.goodput import goodput_misses
from loadgen.measure.pairs import CENSORED, pair_hash, pair_key
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.measure.sessions import SessionTally
from loadgen.report.build import build_report
from loadgen.report.compare import build_comparison

# No explain phase: it re-runs a failing example many times to comment on it, minutes for these.
_PROPS = settings(derandomize=True, max_examples=40, deadline=None, phases=[Phase.generate, Phase.shrink])
_BOUNDS = {"ttft": 400.0, "e2e": 2500.0}  # ms: some requests meet them, some do not
_STATS = ("p50", "p90", "p99")


def _record(variant: str, key: int, sent: float, ttft: float, gaps: list[float]) -> RequestRecord:
    times = [sent + ttft]
    for g in gaps:
        times.append(times[-1] + g)
    rec = RequestRecord(
        f"w0-{variant}-0-{key}",
        variant,
        "chat",
        sent=sent,
        chunk_times=array("d", times),
        chunk_tokens=array("l", [1] * len(times)),
    )
    rec.done, rec.output_tokens, rec.finish_reason = times[-1] + 0.001, len(times), "stop"
    return rec


_request = st.tuples(
    st.floats(0.01, 1.0),  # TTFT, s
    st.lists(st.floats(0.001, 0.2), min_size=1, max_size=12),  # gaps between token chunks, s
)
_requests = st.lists(_request, min_size=32, max_size=48)


def _variant(name: str, draws: list[tuple[float, list[float]]]) -> list[RequestRecord]:
    return [_record(name, k, 10.0 + 0.1 * k, ttft, gaps) for k, (ttft, gaps) in enumerate(draws)]


def _slower(rec: RequestRecord, k: float) -> RequestRecord:
    out = replace(rec, chunk_times=array("d", (rec.sent + (t - rec.sent) * k for t in rec.chunk_times)))
    out.done = rec.sent + (rec.done - rec.sent) * k  # type: ignore[operator]
    return out


def _ended_early(rec: RequestRecord, how: str, at: float) -> RequestRecord:
    """`rec` ended at `at` (a share of its duration) by `how`: what it streamed before stays, the rest never came."""
    assert rec.done is not None
    cut = rec.sent + at * (rec.done - rec.sent)
    kept = [t for t in rec.chunk_times if t < cut]
    out = replace(rec, chunk_times=array("d", kept), chunk_tokens=array("l", [1] * len(kept)))
    out.done, out.output_tokens, out.finish_reason = cut, None, None
    if how == "cut":
        out.cut_by_stop = True
    elif how in ("time", "tokens"):
        out.cancelled = how
    else:
        out.error = how
    return out


def _figures(records: list[RequestRecord], base: list[RequestRecord] | None = None) -> dict[str, float]:
    """What a reader compares variants by, each oriented so that higher is worse: percentiles (a censored one is
    +inf), goodput's share and the paired speedup against `base` (negated)."""
    agg = Aggregate(window_start=0.0)
    for rec in [*records, *(base or [])]:
        rec.goodput_misses = goodput_misses(rec, _BOUNDS)
        agg.add(rec, 0.0)
    g = agg.merged_variant("v")
    out: dict[str, float] = {}
    for metric in ("ttft", "e2e"):
        summary = g.hists[metric].summary_ms(g.censored.get(metric, 0)) if metric in g.hists else {}
        for stat in _STATS:
            value = summary.get(stat) if summary else None
            out[f"{metric}_{stat}"] = math.inf if value is None else float(value)
    out["-goodput_share"] = -(g.goodput_ok / g.window_requests)
    if base is not None:
        for e in build_comparison(agg, ["b", "v"], "b", seed=1, resamples=20):
            speedup = e["speedup"]
            out[f"-speedup_{e['metric']}_{e['stat']}"] = -(0.0 if speedup is None else speedup)
    return out


def _no_better(before: dict[str, float], after: dict[str, float]) -> None:
    for name, value in before.items():
        assert after[name] >= value - 1e-9, (name, value, after[name])


@_PROPS
@given(_requests, st.data(), st.floats(1.0, 8.0))
def test_a_slower_request_never_improves_its_variant(draws, data, k) -> None:
    records = _variant("v", draws)
    i = data.draw(st.integers(0, len(records) - 1))
    before = _figures(records)
    records[i] = _slower(records[i], k)
    _no_better(before, _figures(records))


_ENDINGS = ("cut", "time", "tokens", ErrorKind.TIMEOUT, ErrorKind.STREAM_INTERRUPTED)


@_PROPS
@given(_requests, _requests, st.data())
def test_ending_requests_early_never_improves_percentiles_goodput_or_speedup(base_draws, draws, data) -> None:
    base, records = _variant("b", base_draws), _variant("v", draws)
    before = _figures(records, base)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(records) - 1))
        if fate_of(records[i]) is not Fate.SUCCEEDED:
            continue
        how = data.draw(st.sampled_from(_ENDINGS))
        records[i] = _ended_early(records[i], how, data.draw(st.floats(0.0, 0.99)))
        after = _figures(records, base)
        _no_better(before, after)
        before = after


_any_fate = st.sampled_from(("ok", "drained", *_ENDINGS, "warmup"))


def _with_fate(rec: RequestRecord, fate: str, warmup_end: float, window_end: float) -> RequestRecord:
    if fate == "ok":
        return rec
    if fate == "drained":
        return _slower(rec, 1.0 + (window_end - rec.sent) / (rec.done - rec.sent))  # type: ignore[operator]
    if fate == "warmup":
        rec = replace(rec, sent=warmup_end - 0.5)
        rec.chunk_times = array("d", (t - (rec.chunk_times[0] - rec.sent) + 0.01 for t in rec.chunk_times))
        rec.done = rec.chunk_times[-1] + 0.001
        rec.warmup = sent_in_warmup(rec, warmup_end)
        return rec
    return _ended_early(rec, fate, 0.5)


@_PROPS
@given(st.lists(st.tuples(_request, _any_fate), min_size=1, max_size=40), st.integers(0, 6))
def test_every_request_is_counted_once_by_its_fate_in_every_form(draws, not_sent) -> None:
    warmup_end, window_end = 9.0, 20.0
    records = [
        _with_fate(_record("v", k, 10.0 + 0.1 * k, ttft, gaps), fate, warmup_end, window_end)
        for k, ((ttft, gaps), fate) in enumerate(draws)
    ]
    agg = Aggregate(window_start=warmup_end)
    agg.window_end = window_end
    for rec in records:
        agg.add(rec, 0.0)
    for _ in range(not_sent):
        agg.group("v", "chat").add_not_sent()
    g = agg.merged_variant("v")
    expected: dict[str, int] = {}
    for rec in records:
        f = fate_of(rec, window_end).value
        expected[f] = expected.get(f, 0) + 1
    if not_sent:
        expected[Fate.NOT_SENT.value] = not_sent
    assert g.fates == expected and sum(g.fates.values()) == len(records) + not_sent
    # The counters are views of the fates: each request in exactly one of them.
    ended = sum(n for f, n in g.fates.items() if FATES[Fate(f)].outcome != "neither")
    assert g.requests == ended and g.cut_by_stop == g.fates.get("cut_at_stop", 0)
    assert g.cancelled == g.fates.get("cancelled_by_time", 0) + g.fates.get("cancelled_by_tokens", 0)
    assert g.warmup_excluded == g.fates.get("in_warmup", 0)
    assert g.ok + sum(g.errors.values()) == g.requests
    # After the wire, as the master merges it, and in the report.
    master = Aggregate()
    master.merge_wire(agg.pop_delta())
    assert master.merged_variant("v").fates == expected
    report = build_report(parse_scenario(_SCENARIO), master, window_end - warmup_end)
    assert report["variants"][0]["overall"]["fates"] == dict(sorted(expected.items()))


_SCENARIO = "variants:\n  - {name: v, base_url: 'http://127.0.0.1:9', model: m}\n"


@_PROPS
@given(st.lists(st.tuples(_request, _any_fate), min_size=1, max_size=40))
def test_a_baseline_request_of_the_window_is_paired_or_censored_never_dropped(draws) -> None:
    warmup_end, window_end = 9.0, 20.0
    agg = Aggregate(window_start=warmup_end)
    agg.window_end = window_end
    records = []
    for k, ((ttft, gaps), fate) in enumerate(draws):
        for variant in ("b", "v"):
            rec = _with_fate(_record(variant, k, 10.0 + 0.1 * k, ttft, gaps), fate, warmup_end, window_end)
            records.append(rec)
            agg.add(rec, 0.0)
    keys_b, values_b = agg.pairs.samples("b")
    keys_v, _ = agg.pairs.samples("v")
    kept = dict(zip(keys_b, values_b["e2e"], strict=True))
    for rec in records:
        if rec.variant != "b":
            continue
        row = FATES[fate_of(rec, window_end)]
        h = pair_hash(pair_key(rec))  # type: ignore[arg-type]
        assert (h in kept) == row.in_window
        if row.in_window:
            assert h in set(keys_v)  # its copy in the other variant too: a pair
            assert (kept[h] == CENSORED) == (row.e2e.value == "censored")


@_PROPS
@given(st.lists(_request, min_size=1, max_size=30), st.floats(0.0, 3.0))
def test_the_window_is_by_send_time_and_throughput_by_token_time(draws, warmup) -> None:
    """Requests sent before the warm-up's end are outside the window whenever they end; output tokens count when
    they arrived inside [start, end], whichever request carried them."""
    start, end = 10.0 + warmup, 13.0
    agg = Aggregate(window_start=start)
    agg.window_end = end
    records = _variant("v", draws)
    for rec in records:
        rec.warmup = sent_in_warmup(rec, start)
        agg.add(rec, 0.0)
    g = agg.merged_variant("v")
    in_window = [r for r in records if r.sent >= start]
    assert g.warmup_excluded == len(records) - len(in_window)
    assert g.requests == len(in_window)
    assert g.output_tokens == sum(1 for r in records for t in r.chunk_times if start <= t <= end)
    ttft = g.hists.get("ttft")
    assert (ttft.count if ttft else 0) == len(in_window)


# ---- agent sessions: a task's fate read from its steps' through the table's `session` column ----

_STEP_ENDINGS = st.sampled_from(["error", "timeout", "cut_by_stop", "cancelled", "stopped_between_steps"])


def _task(variant: str, key: int, seconds: float, ending: str | None) -> SessionTally:
    """A task of two steps lasting `seconds`; `ending`: how its second step (or the wait before it) ended early."""
    first = _record(variant, key, 0.0, 0.05, [0.01])
    second = _record(variant, key, seconds / 2, 0.05, [0.01])
    second.request_id, second.turn = f"w0-{variant}-0-{key}-t2", 2
    second.done = seconds
    tally = SessionTally(f"0-{key}", variant, "chat", [first], tool_s=0.1)
    if ending == "stopped_between_steps":
        tally.stopped = True
        return tally
    tally.records.append(second)
    if ending == "error":
        second.error = ErrorKind.HTTP_5XX
    elif ending == "timeout":
        second.error = ErrorKind.TIMEOUT
    elif ending == "cut_by_stop":
        second.cut_by_stop = True
    elif ending == "cancelled":
        second.cancelled = "time"
    else:
        tally.ended = seconds
    return tally


@given(st.lists(st.floats(1.0, 60.0), min_size=32, max_size=48), st.data())
def test_ending_agent_tasks_early_never_improves_their_durations_goodput_or_speedup(durations, data) -> None:
    from loadgen.report.session_compare import session_comparison

    def run(endings: dict[int, str]) -> tuple[Aggregate, dict[str, object]]:
        agg = Aggregate()
        agg.window_end = 1e9
        for key, d in enumerate(durations):
            agg.add_session(_task("base", key, d, None), judged=False)
            # The variant: the same tasks, each 1.5× as long; the chosen ones ended early, 10 % of the way in.
            agg.add_session(_task("v", key, (0.1 if key in endings else 1.5) * d, endings.get(key)), judged=False)
        entries = {e["stat"]: e for e in session_comparison(agg, ["base", "v"], "base", seed=1)}
        return agg, entries

    chosen = data.draw(st.lists(st.integers(0, len(durations) - 1), unique=True, min_size=1, max_size=8))
    endings = {k: data.draw(_STEP_ENDINGS) for k in chosen}
    whole, whole_cmp = run({})
    early, early_cmp = run(endings)
    s_whole, s_early = whole.sessions[("v", "chat")], early.sessions[("v", "chat")]
    # Every task counted once, by its fate.
    assert sum(s_early.fates.values()) == len(durations) and s_early.fates.get("completed", 0) == len(durations) - len(
        chosen
    )
    a = s_whole.duration.summary_ms(s_whole.censored)
    b = s_early.duration.summary_ms(s_early.censored)
    for stat in _STATS:
        assert b[stat] is None or (a[stat] is not None and b[stat] >= a[stat] * (1 - 1e-3)), (stat, a, b)
    for stat, entry in early_cmp.items():  # the comparison's statistics
        before, after = whole_cmp[stat]["speedup"], entry["speedup"]
        assert after is None or (before is not None and after <= before * (1 + 1e-3)), (stat, before, after)
    assert s_early.good <= s_whole.good
