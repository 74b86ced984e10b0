from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.measure.aggregate import Aggregate
from loadgen.measure.group_stats import _COUNTERS, _COUNTS, GroupStats
from loadgen.measure.histogram import LatencyHistogram
from loadgen.measure.records import ErrorKind, RequestRecord, TokenSource
from loadgen.report.combine import read_aggregate, write_aggregate


def _rec(variant: str, mix: str, sent: float, times: list[float], tokens: list[int], **kw: object) -> RequestRecord:
    rec = RequestRecord(f"{variant}-{sent}", variant, mix, sent=sent, done=times[-1] if times else sent + 1)
    rec.chunk_times, rec.chunk_tokens = list(times), list(tokens)
    rec.output_tokens = sum(tokens)
    rec.prompt_tokens = 100
    rec.token_source = TokenSource.SERVER
    for k, v in kw.items():
        setattr(rec, k, v)
    return rec


def test_add_records_every_metric_per_variant_and_mix() -> None:
    agg = Aggregate()
    agg.add(_rec("a", "chat", 0.0, [0.1, 0.14, 0.18], [4, 4, 4]), wall_time=1000.2)
    agg.add(_rec("a", "chat", 0.0, [], [], error=ErrorKind.HTTP_429), wall_time=1000.5)
    agg.add(_rec("a", "rag", 0.0, [0.3], [1], warmup=True), wall_time=999.0)
    g = agg.group("a", "chat")
    assert (g.requests, g.ok, g.errors) == (2, 1, {"http_429": 1})
    assert g.output_tokens == 12 and g.prompt_tokens == 100
    assert g.hists["itl"].count == 8  # two gaps × 4 tokens
    assert g.hists["icl"].count == 2
    assert g.hists["itl"].percentile(50) == pytest.approx(0.010, rel=1e-3)
    assert g.hists["tpot"].percentile(50) == pytest.approx(0.08 / 8, rel=1e-3)
    assert agg.group("a", "rag").warmup_excluded == 1 and agg.group("a", "rag").requests == 0
    assert agg.timeline == {1000: [2, 1, 12]}


def test_delta_wire_round_trip_merges_without_double_counting() -> None:
    worker = Aggregate()
    master = Aggregate()
    for i in range(10):
        worker.add(_rec("a", "chat", 0.0, [0.1 + i / 1000, 0.2], [1, 1]), wall_time=5.0)
        if i % 3 == 0:
            master.merge_wire(worker.pop_delta())
    master.merge_wire(worker.pop_delta())
    master.merge_wire(worker.pop_delta())  # an empty delta adds nothing
    g = master.group("a", "chat")
    assert g.requests == 10 and g.hists["ttft"].count == 10
    assert master.timeline == {5: [10, 10, 20]}
    assert worker.is_empty()


def test_wire_version_is_checked() -> None:
    with pytest.raises(ValueError, match="wire version"):
        Aggregate().merge_wire({"v": 99})


def test_merged_variant_sums_mixes() -> None:
    agg = Aggregate()
    agg.add(_rec("a", "chat", 0.0, [0.1], [1]), 1.0)
    agg.add(_rec("a", "rag", 0.0, [0.2], [1]), 1.0)
    agg.add(_rec("b", "rag", 0.0, [0.3], [1]), 1.0)
    assert agg.merged_variant("a").requests == 2
    assert agg.variants() == ["a", "b"]


def test_counter_only_deltas_keep_histograms_for_a_later_delta() -> None:
    import random

    rng = random.Random(5)
    whole, master, worker = Aggregate(), Aggregate(), Aggregate()
    for i in range(60):
        r = RequestRecord(f"r{i}", "v", ("chat", "rag")[i % 2], sent=float(i))
        r.chunk_times = [i + 0.02 + 0.01 * j + rng.uniform(0, 1e-3) for j in range(5)]
        r.chunk_tokens = [1, 1, 2, 1, 3]
        r.done = r.chunk_times[-1]
        whole.add(r, 1000.0 + i)
        worker.add(r, 1000.0 + i)
        if i % 7 == 6:
            master.merge_wire(worker.pop_delta(histograms=i % 21 == 20))
    master.merge_wire(worker.pop_delta())
    for key, g in whole.groups.items():
        m = master.groups[key]
        assert (m.requests, m.ok, m.output_tokens) == (g.requests, g.ok, g.output_tokens)
        for name, h in g.hists.items():
            assert m.hists[name].count == h.count
            assert m.hists[name].percentile(50) == h.percentile(50)
    assert master.timeline == whole.timeline


def test_histograms_travel_raw_and_survive_aggregate_json(tmp_path: Path) -> None:
    # The wire carries each histogram as its raw V2 payload (bytes, in Locust's msgpack); aggregate.json writes them
    # as base64 text: both read back to the same counts as the worker's own histograms.
    worker = Aggregate()
    for i in range(200):
        worker.add(_rec("a", "chat", 0.0, [0.05 + i / 997, 0.2 + i / 500, 0.3 + i / 400], [1, 2, 1]), wall_time=5.0)
    want = {m: h.encode() for m, h in worker.group("a", "chat").hists.items()}
    wire = worker.pop_delta()
    (_, _, g) = wire["groups"][0]
    assert all(isinstance(b, bytes) and b[:1] == b"\x1c" for b in g["hists"].values())
    master = Aggregate()
    master.merge_wire(wire)
    back = read_aggregate(write_aggregate(master, tmp_path))
    for agg in (master, back):
        got = agg.group("a", "chat").hists
        assert {m: got[m].encode() for m in want} == want
        assert got["ttft"].count == 200 and got["itl"].count == 600


def test_zero_counters_stay_off_the_wire_and_every_counter_still_merges() -> None:
    # A delta carries only the counters and counts it has (most are zero: drained, cancelled, cache…); the master
    # adds what is there, and a group that had them all comes through whole.
    worker = Aggregate()
    for i in range(5):
        worker.add(_rec("a", "chat", 0.0, [0.1 + i / 100], [2]), wall_time=5.0)
    gw = worker.pop_delta()["groups"][0][2]
    assert {"requests", "ok", "output_tokens", "fates"} <= set(gw)
    assert not {"cancelled", "drained", "errors", "arrivals"} & set(gw)
    full = GroupStats()
    for k, name in enumerate(_COUNTERS):
        setattr(full, name, k + 1)
    for name in _COUNTS:
        setattr(full, name, {"x": 3})
    into = GroupStats()
    into.merge_wire(full.to_wire())
    into.merge_wire(full.to_wire())
    assert [getattr(into, n) for n in _COUNTERS] == [2 * (k + 1) for k in range(len(_COUNTERS))]
    assert all(getattr(into, n) == {"x": 6} for n in _COUNTS)


def test_a_blob_two_metrics_share_travels_once_and_merges_into_both() -> None:
    # Equal histograms (one-token chunks: ITL and the inter-chunk gaps alike) travel as one blob and an alias; the
    # master adds the blob to each, and an alias whose source is not in the delta adds nothing.
    worker = Aggregate()
    for i in range(4):
        worker.add(_rec("a", "chat", 0.0, [0.1 + i / 100, 0.2, 0.3], [1, 1, 1]), wall_time=5.0)
    gw = worker.pop_delta()["groups"][0][2]
    assert gw["alias"] and all(src in gw["hists"] and a not in gw["hists"] for a, src in gw["alias"].items())
    into = GroupStats()
    into.merge_wire(gw)
    into.merge_wire(gw)
    for a, src in gw["alias"].items():
        assert into.hists[a].count == into.hists[src].count == 2 * LatencyHistogram.decode(gw["hists"][src]).count > 0
        assert into.hists[a].percentiles_ms([50, 99]) == into.hists[src].percentiles_ms([50, 99])
    lone = GroupStats()
    lone.merge_wire({"hists": {}, "alias": {"x": "missing"}, "requests": 1})
    assert lone.requests == 1 and not any(h.count for h in lone.hists.values())
