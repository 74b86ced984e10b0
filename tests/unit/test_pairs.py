"""Per-request samples for paired comparisons (loadgen/measure/pairs.py): the key is the request's identity, the
hash sampling keeps the same keys in every variant whatever the merge order, and the wire carries them through the
aggregate (workers' deltas, aggregate.json)."""

from __future__ import annotations

import math
import random
from array import array

import orjson

from loadgen.measure.aggregate import Aggregate
from loadgen.measure.hash_sample import words
from loadgen.measure.pairs import CENSORED, PAIR_METRICS, PairSamples, pair_hash, pair_key
from loadgen.measure.records import ErrorKind, RequestRecord
from loadgen.report.combine import _text


def _rec(variant: str, stream: int, index: int, *, worker: str = "r1-w0-4242", turn: int = 0, ttft: float = 0.05):
    rid = f"{worker}-{variant}-{stream}-{index}" + (f"-t{turn}" if turn > 1 else "")
    times = array("d", [10.0 + ttft + 0.01 * k for k in range(5)])
    rec = RequestRecord(rid, variant, "chat", sent=10.0, chunk_times=times, turn=turn)
    rec.chunk_tokens = array("l", [1] * 5)
    rec.done = times[-1]
    rec.output_tokens = 5
    return rec


def test_the_key_is_stream_index_and_turn_whatever_the_worker_and_variant() -> None:
    a = _rec("spec-decode", 100_005, 42, worker="r3-w1-999")
    b = _rec("baseline", 100_005, 42, worker="r1-w0-7")
    assert pair_key(a) == pair_key(b) == "100005-42-0"
    assert pair_key(_rec("int8", 7, 3, turn=3)) == "7-3-3"
    # Turn 1 opens a session (no suffix in the id) and is another request than turn 0's.
    assert pair_key(_rec("int8", 7, 3, turn=1)) == "7-3-1"
    assert pair_key(RequestRecord("not-a-stream-id", "a", "chat")) is None
    assert pair_key(RequestRecord("w-a-1-2-t3", "a", "chat", turn=2)) is None  # suffix of another turn
    assert 0 <= pair_hash("7-3-3") < 2**63 and pair_hash("7-3-3") == pair_hash("7-3-3")


def test_requests_of_the_window_are_kept_and_a_failed_one_is_censored() -> None:
    p = PairSamples()
    p.add(_rec("a", 1, 0))
    failed = _rec("a", 1, 1)  # streamed its first tokens, then timed out: a measured TTFT, a censored E2E
    failed.error = ErrorKind.TIMEOUT
    refused = RequestRecord("r1-w0-4242-a-1-4", "a", "chat", sent=10.0, error=ErrorKind.HTTP_5XX)
    warm = _rec("a", 1, 2)
    warm.warmup = True
    cut = _rec("a", 1, 3)
    cut.cut_by_stop = True
    for r in (failed, refused, warm, cut):
        p.add(r)
    keys, values = p.samples("a")
    # The warm-up request is outside the window; the one the stop cut is in it (measure/fates.py).
    assert list(keys) == [pair_hash(k) for k in ("1-0-0", "1-1-0", "1-4-0", "1-3-0")]
    assert values["ttft"][0] == 50_000 and values["e2e"][0] == 90_000 and values["tpot"][0] == 10_000
    # Failed: censored (above every measured value) where it never got to: a TPOT needs the whole reply.
    assert [values[m][1] for m in PAIR_METRICS] == [50_000, CENSORED, CENSORED]
    assert [values[m][2] for m in PAIR_METRICS] == [CENSORED, CENSORED, CENSORED]
    # Cut by the stop: what it reached is measured, its end censored, as in the report's percentiles.
    assert [values[m][3] for m in PAIR_METRICS] == [50_000, CENSORED, CENSORED]


def _kept(p: PairSamples, variant: str) -> set[int]:
    return set(p.samples(variant)[0])


def test_sampling_keeps_the_same_keys_in_every_variant_whatever_the_merge_order() -> None:
    cap = 300
    requests = [(s, i) for s in range(40) for i in range(100)]  # 4,000 requests, the same for both variants
    rng = random.Random(5)
    # Ground truth: the lowest level at which at most `cap` of the keys survive, and those keys.
    hashes = {pair_hash(f"{s}-{i}-0") for s, i in requests}
    level = next(L for L in range(64) if sum(h < 2 ** (63 - L) for h in hashes) <= cap)
    expected = {h for h in hashes if h < 2 ** (63 - level)}
    assert 150 < len(expected) <= cap
    results = []
    for trial in range(3):
        # Three workers, each variant's requests spread over them differently; each ships several deltas.
        workers = [Aggregate() for _ in range(3)]
        for w in workers:
            w.pairs.cap = cap
        deltas = []
        for v in ("a", "b"):
            order = requests[:]
            rng.shuffle(order)
            for k, (s, i) in enumerate(order):
                w = workers[rng.randrange(3)]
                w.add(_rec(v, s, i), 0.0)
                if k % 700 == 0:
                    deltas.append(w.pop_delta())
        deltas += [w.pop_delta() for w in workers]
        random.Random(trial).shuffle(deltas)
        master = Aggregate()
        master.pairs.cap = cap
        for d in deltas:
            master.merge_wire(orjson.loads(orjson.dumps(d, default=_text)))  # plain data, as on the wire
        results.append((master.pairs.level, _kept(master.pairs, "a"), _kept(master.pairs, "b")))
    for lvl, a, b in results:
        assert lvl == level
        assert a == b == expected


def test_a_worker_ships_logarithmically_many_keys_over_a_run() -> None:
    cap, n = 200, 20_000
    w = PairSamples(cap=cap)
    shipped = 0
    for i in range(n):
        w.add(_rec("a", 0, i))
        if i % 500 == 499:
            cols = w.to_wire()["columns"]
            shipped += len(words(cols[0][1])) if cols else 0
            w.clear_rows()
    assert 2 ** (w.level - 1) < n / cap <= 2**w.level
    # cap keys before the first rise, then about cap / 2 per level: cap * (1 + log2(n / cap) / 2) ~ 864, not n.
    assert cap < shipped <= 1.2 * cap * (1 + math.log2(n / cap) / 2)


def test_the_aggregate_carries_pairs_through_its_wire_and_aggregate_json() -> None:
    agg = Aggregate()
    for i in range(50):
        agg.add(_rec("a", 3, i, ttft=0.01 * (i + 1)), 0.0)
        agg.add(_rec("b", 3, i), 0.0)
    wire = orjson.loads(orjson.dumps(agg.to_wire(), default=_text))
    again = Aggregate()
    again.merge_wire(wire)
    for v in ("a", "b"):
        k0, v0 = agg.pairs.samples(v)
        k1, v1 = again.pairs.samples(v)
        assert list(k0) == list(k1) and len(k0) == 50
        assert all(list(v0[m]) == list(v1[m]) for m in PAIR_METRICS)
    # A worker's delta ships its rows and empties them, but keeps its level.
    agg.pairs.level = 2
    assert agg.pop_delta()["pairs"]["level"] == 2
    assert agg.pairs.is_empty() and agg.pairs.level == 2
